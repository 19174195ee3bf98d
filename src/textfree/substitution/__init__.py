"""Word-level text-to-text privatization: T2T and PCT2T (Feyisetan et al. 2020; RAPT, arXiv 2305.06212).

Each word of a text is embedded, perturbed with L2-Laplace noise and replaced by the nearest table word, so
the client sends text, not vectors. See docs/substitution.md.
"""

from ..geometry import gamma, max_pairwise_distance
from .embeddings import COMMON_PUNCTUATION, SubwordEmbedder, WordEmbeddingTable, default_whole_words
from .nn import (
    AUTO_FAISS_MIN_QUERIES,
    BACKENDS,
    DEFAULT_SHORTLIST,
    SEARCH_MODES,
    NearestNeighbors,
    faiss_available,
    resolve_backend,
)
from .pos import (
    PTB_TO_UNIVERSAL,
    TAGGERS,
    UNIVERSAL_TAGS,
    NltkPerceptronTagger,
    Tagger,
    TextBlobTagger,
    category_masks,
    get_tagger,
    ptb_to_universal,
)
from .t2t import ALL_POS_CATEGORIES, DEFAULT_POS_CATEGORIES, OOV_POLICIES, T2TResult, TextToText, pct2t
from .text import rejoin, split_text, words_of

__all__ = [
    "ALL_POS_CATEGORIES",
    "AUTO_FAISS_MIN_QUERIES",
    "BACKENDS",
    "COMMON_PUNCTUATION",
    "DEFAULT_POS_CATEGORIES",
    "DEFAULT_SHORTLIST",
    "NearestNeighbors",
    "NltkPerceptronTagger",
    "OOV_POLICIES",
    "PTB_TO_UNIVERSAL",
    "SEARCH_MODES",
    "SubwordEmbedder",
    "T2TResult",
    "TAGGERS",
    "Tagger",
    "TextBlobTagger",
    "TextToText",
    "UNIVERSAL_TAGS",
    "WordEmbeddingTable",
    "category_masks",
    "default_whole_words",
    "faiss_available",
    "gamma",
    "get_tagger",
    "max_pairwise_distance",
    "pct2t",
    "ptb_to_universal",
    "rejoin",
    "resolve_backend",
    "split_text",
    "words_of",
]
