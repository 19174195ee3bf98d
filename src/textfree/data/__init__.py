"""Datasets, the deterministic PPFT split, and PPFT prompt construction.

Real data is read by path from the shared data directory (``$TEXTFREE_DATA`` or ``../shared/data``; see
:func:`shared_data_dir`); loaders also take a Hugging Face hub name when the optional ``datasets`` package is
installed (``pip install textfree[hub]``); a file in any other layout through a column mapping
(:func:`load_table`). See ``docs/data.md``.
"""

from .errors import DataError, DataNotFoundError, HubUnavailableError, UnknownDatasetError
from .glue import load_cola, load_mrpc, load_qqp, load_rte, load_sst2
from .gsm8k import extract_final_answer, load_gsm8k
from .instruct import load_alpaca, load_instruct, load_lima
from .normalize import normalize_answer
from .paths import shared_data_dir
from .presidio import load_presidio
from .privacyrestore import find_answer_index, load_privacyrestore, split_question
from .prompts import (
    MCQA_INSTRUCTION,
    OPEN_INSTRUCTION,
    PromptParts,
    answer_target,
    blind_prompt,
    contains_answer,
    is_correct,
    mcqa_prompt,
    open_answer_prompt,
    options_block,
    parse_options_block,
    private_text,
    task_labels,
)
from .pupa import load_pupa
from .qa import load_arc, load_csqa
from .records import InstructRecord, MCQARecord, PairRecord, PIIRecord, TextRecord
from .registry import DatasetSpec, available_datasets, get_dataset_spec, load_dataset, register_dataset
from .splits import SPLIT_SALT, ppft_split, private_key, stable_unit_interval
from .table import AttributeColumn, ColumnMap, load_table
from .trustpilot import load_trustpilot

__all__ = [
    # errors and paths
    "DataError",
    "DataNotFoundError",
    "HubUnavailableError",
    "UnknownDatasetError",
    "shared_data_dir",
    # records
    "MCQARecord",
    "TextRecord",
    "PairRecord",
    "InstructRecord",
    "PIIRecord",
    # loaders
    "load_privacyrestore",
    "find_answer_index",
    "split_question",
    "load_sst2",
    "load_cola",
    "load_rte",
    "load_mrpc",
    "load_qqp",
    "load_trustpilot",
    "load_pupa",
    "load_presidio",
    "load_instruct",
    "load_alpaca",
    "load_lima",
    "load_csqa",
    "load_arc",
    "load_gsm8k",
    "extract_final_answer",
    "load_table",
    "ColumnMap",
    "AttributeColumn",
    # registry
    "DatasetSpec",
    "load_dataset",
    "register_dataset",
    "get_dataset_spec",
    "available_datasets",
    # split
    "ppft_split",
    "stable_unit_interval",
    "private_key",
    "SPLIT_SALT",
    # prompts
    "PromptParts",
    "MCQA_INSTRUCTION",
    "OPEN_INSTRUCTION",
    "mcqa_prompt",
    "blind_prompt",
    "open_answer_prompt",
    "options_block",
    "parse_options_block",
    "private_text",
    "task_labels",
    "answer_target",
    "normalize_answer",
    "is_correct",
    "contains_answer",
]
