"""BeamClean's cross-model prior (BeamClean §5, Fig. 5): the restricted one-to-one token mapping
(:mod:`textfree.attacks.token_mapping`), :class:`CausalLMPrior` with ``mapping="one_to_one"``, the cell kind's
``prior`` spec and the report's cross-model section.

Everything runs on a tiny uncased WordPiece "target" tokenizer (and a N(0, 1) table over it) and a tiny cased
byte-level BPE Llama built in the test: no downloads.
"""

import json
import math

import pytest
import torch

from textfree.attacks import BeamCleanConfig, CausalLMPrior, ThreatModel, beamclean_attack
from textfree.attacks.token_mapping import TokenMapping, one_to_one_mapping, surface_versions
from textfree.experiments import CellError, run_cell

WORDS = ["the", "patient", "has", "a", "fever", "cough", "and", "pain", "monday", "zyx", "##s", ",", "."]
TARGET_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
# cased public text for the LM's BPE: "Monday" only capitalised, "zyx" never (stays several BPE tokens)
LM_TEXTS = [
    "The patient has a fever, and a cough.",
    "On Monday the patient has pain, and fevers.",
    "the patient has a cough and pain.",
    "a fever and a cough, the patient has pain on Monday.",
] * 8
GRANT = ThreatModel(embedding_table=True, training_text="public")
D = 16


@pytest.fixture(scope="module")
def target_tokenizer():
    from transformers import BertTokenizerFast

    return BertTokenizerFast(vocab={w: i for i, w in enumerate(TARGET_VOCAB)})


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory, save_tiny_llama):
    """A 2-layer Llama with a byte-level BPE tokenizer trained on LM_TEXTS (BOS 0)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(LM_TEXTS, trainer)
    lm_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", pad_token="<pad>")
    out = tmp_path_factory.mktemp("tiny-bpe-llama")
    return save_tiny_llama(out, lm_tok, bos_token_id=0, eos_token_id=0, pad_token_id=1)


@pytest.fixture(scope="module")
def lm_tokenizer(lm_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(lm_dir)


@pytest.fixture(scope="module")
def mapping(target_tokenizer, lm_tokenizer):
    return one_to_one_mapping(target_tokenizer, lm_tokenizer)


def _lm_token(lm_tokenizer, text):
    ids = lm_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, (text, ids)
    return ids[0]


# ------------------------------------------------------------------------------------------------- the mapping
def test_surface_versions_prefer_the_exact_string_then_case_then_space():
    assert surface_versions(" the") == [" the", " The", "the", "The"]
    assert surface_versions("s") == ["s", "S"]
    assert surface_versions(" ,", implicit_spaces=True)[:2] == [",", " ,"]  # WordPiece punctuation attaches
    assert surface_versions(" ,")[0] == " ,"
    assert surface_versions("") == [] and surface_versions("   ") == []
    with pytest.raises(TypeError, match="42"):
        surface_versions(42)


def test_mapping_is_one_to_one_and_takes_each_tokens_best_free_version(mapping, target_tokenizer, lm_tokenizer):
    tid = target_tokenizer.convert_tokens_to_ids
    assert mapping.target_vocab_size == len(TARGET_VOCAB) and mapping.lm_vocab_size == len(lm_tokenizer)
    # one-to-one: no id repeats on either side, and lm_of agrees with the aligned pairs
    assert len(set(mapping.target_ids.tolist())) == mapping.size == len(set(mapping.lm_ids.tolist()))
    assert torch.equal(mapping.lm_of[mapping.target_ids], mapping.lm_ids)
    assert int((mapping.lm_of >= 0).sum()) == mapping.size
    assert mapping.target_ids.tolist() == sorted(mapping.target_ids.tolist())
    # exact surface strings where the LM has them
    assert mapping.lm_of[tid("the")] == _lm_token(lm_tokenizer, " the")
    assert mapping.lm_of[tid("patient")] == _lm_token(lm_tokenizer, " patient")
    assert mapping.lm_of[tid("##s")] == _lm_token(lm_tokenizer, "s")  # a continuation: no space
    assert mapping.lm_of[tid(",")] == _lm_token(lm_tokenizer, ",")  # WordPiece punctuation: without the space
    # an uncased target token takes the cased version when the LM only has that one
    assert mapping.lm_of[tid("monday")] == _lm_token(lm_tokenizer, " Monday")
    # no single-token version: unmapped; special tokens never map
    assert mapping.lm_of[tid("zyx")] == -1
    for special in target_tokenizer.all_special_ids:
        assert mapping.lm_of[special] == -1
    assert set(mapping.unmapped_ids.tolist()) == set(range(len(TARGET_VOCAB))) - set(mapping.target_ids.tolist())
    assert mapping.coverage([tid("the"), tid("zyx")]) == 0.5 and math.isnan(mapping.coverage([]))
    # max_rank=1: exact surfaces only, so "monday" (only " Monday" in the LM) is unmapped
    exact = one_to_one_mapping(target_tokenizer, lm_tokenizer, max_rank=1)
    assert exact.lm_of[tid("monday")] == -1 and exact.lm_of[tid("the")] == mapping.lm_of[tid("the")]


def test_a_contested_lm_token_goes_to_the_exact_surface_only(lm_tokenizer):
    """ " Monday" is the exact surface of target "Monday" and the capitalised version of target "monday": the exact
    one wins and the other stays unmapped (never two target tokens on one LM token)."""
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "monday", "Monday", "##s"]  # a "##" token: WordPiece surfaces (" monday")
    cased = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=False)
    m = one_to_one_mapping(cased, lm_tokenizer)
    assert m.lm_of[3] == _lm_token(lm_tokenizer, " Monday") and m.lm_of[2] == -1 and m.size == 2


def test_context_ids_translate_a_prefix_token_by_token(mapping, target_tokenizer, lm_tokenizer):
    tid = target_tokenizer.convert_tokens_to_ids
    prefix = [target_tokenizer.cls_token_id, tid("the"), tid("patient"), tid("zyx"), tid("##s"), tid(",")]
    zyx = lm_tokenizer(" zyx", add_special_tokens=False)["input_ids"]
    assert len(zyx) > 1
    expected = [int(mapping.lm_of[tid("the")]), int(mapping.lm_of[tid("patient")]), *zyx]
    expected += [int(mapping.lm_of[tid("##s")]), int(mapping.lm_of[tid(",")])]
    assert mapping.context_ids(prefix) == expected  # [CLS] dropped, "zyx" as the LM spells it
    assert mapping.context_ids([]) == []
    with pytest.raises(ValueError, match="999"):
        mapping.context_ids([tid("the"), 999])
    with pytest.raises(ValueError, match="-3"):
        mapping.coverage([-3])


def test_restricted_log_probs_sum_to_one_over_the_mapped_set(mapping):
    logits = torch.randn(3, mapping.lm_vocab_size, generator=torch.Generator().manual_seed(0))
    r = mapping.restricted_log_probs(logits)
    assert r.shape == (3, mapping.size) and r.dtype == torch.float64
    assert torch.allclose(r.logsumexp(dim=1), torch.zeros(3, dtype=torch.float64))
    # restricting and renormalising keeps the LM's odds between mapped tokens
    assert torch.allclose(r[:, 0] - r[:, 1], (logits[:, mapping.lm_ids[0]] - logits[:, mapping.lm_ids[1]]).double())
    with pytest.raises(ValueError, match=r"\(3, 2\)"):
        mapping.restricted_log_probs(logits[:, :2])


def test_bad_inputs_name_the_bad_value(target_tokenizer, lm_tokenizer):
    with pytest.raises(ValueError, match="max_rank.*0"):
        one_to_one_mapping(target_tokenizer, lm_tokenizer, max_rank=0)
    with pytest.raises(ValueError, match="target_vocab_size.*-1"):
        one_to_one_mapping(target_tokenizer, lm_tokenizer, target_vocab_size=-1)
    with pytest.raises(ValueError, match="beyond the LM's 5 outputs"):
        one_to_one_mapping(target_tokenizer, lm_tokenizer, lm_vocab_size=5)
    ids = torch.tensor([1, 2])
    with pytest.raises(ValueError, match="one-to-one"):
        TokenMapping(3, 4, ids, torch.tensor([0, 0]), torch.tensor([-1, 0, 0]), ((), (0,), (0,)), (0, 0))
    with pytest.raises(ValueError, match="LM id 7"):
        TokenMapping(3, 4, ids, torch.tensor([0, 7]), torch.tensor([-1, 0, 7]), ((), (0,), (7,)), (0, 0))


# ---------------------------------------------------------------------------------------------------- the prior
def test_one_to_one_prior_restricts_and_renormalises(lm_dir, target_tokenizer, lm_tokenizer):
    from transformers import AutoModelForCausalLM

    prior = CausalLMPrior.from_pretrained(str(lm_dir), target_tokenizer=target_tokenizer, mapping="one_to_one")
    tm = prior.token_mapping
    assert prior.vocab_size == len(TARGET_VOCAB) and prior.start_ids == [0]
    tid = target_tokenizer.convert_tokens_to_ids
    prefixes = [[], [target_tokenizer.cls_token_id], [tid("the"), tid("patient")], [tid("zyx"), tid("has")]]
    lp = prior.log_probs(prefixes)
    assert lp.shape == (4, len(TARGET_VOCAB)) and lp.dtype == torch.float64
    # sums to 1 over the mapped set; probability 0 elsewhere; the unmapped ids are what BeamClean must exclude
    assert torch.allclose(lp[:, tm.target_ids].logsumexp(dim=1), torch.zeros(4, dtype=torch.float64))
    assert torch.isneginf(lp[:, tm.unmapped_ids]).all()
    assert prior.excluded_ids == tuple(tm.unmapped_ids.tolist())
    # exactly the LM's next-token distribution, restricted and renormalised
    model = AutoModelForCausalLM.from_pretrained(lm_dir).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[0] + tm.context_ids(prefixes[2])])).logits[0, -1]
    want = torch.log_softmax(logits[tm.lm_ids].double(), dim=0)
    assert torch.allclose(lp[2, tm.target_ids], want, atol=1e-6)
    # unmapped_mass: the unmapped tokens share alpha evenly; every row is a distribution over the whole vocabulary
    mixed = CausalLMPrior.from_pretrained(
        str(lm_dir), target_tokenizer=target_tokenizer, mapping="one_to_one", unmapped_mass=0.2
    )
    lq = mixed.log_probs(prefixes)
    n_unmapped = len(tm.unmapped_ids)
    assert torch.allclose(lq.logsumexp(dim=1), torch.zeros(4, dtype=torch.float64))
    assert torch.allclose(lq[:, tm.target_ids].logsumexp(dim=1), torch.full((4,), math.log(0.8), dtype=torch.float64))
    assert torch.allclose(lq[:, tm.unmapped_ids], torch.full((4, n_unmapped), math.log(0.2 / n_unmapped)).double())
    assert mixed.excluded_ids == ()


def test_one_to_one_prior_rejects_bad_settings(lm_dir, target_tokenizer):
    with pytest.raises(ValueError, match="'two_to_one'"):
        CausalLMPrior.from_pretrained(str(lm_dir), target_tokenizer=target_tokenizer, mapping="two_to_one")
    with pytest.raises(ValueError, match="1.5"):
        CausalLMPrior.from_pretrained(
            str(lm_dir), target_tokenizer=target_tokenizer, mapping="one_to_one", unmapped_mass=1.5
        )
    with pytest.raises(ValueError, match="'first_subtoken'"):
        CausalLMPrior.from_pretrained(str(lm_dir), target_tokenizer=target_tokenizer, unmapped_mass=0.1)
    with pytest.raises(ValueError, match="needs a target_tokenizer"):
        CausalLMPrior.from_pretrained(str(lm_dir), mapping="one_to_one")


def test_beamclean_with_the_cross_model_prior_end_to_end(lm_dir, target_tokenizer):
    """Tiny noise: every mapped token comes back; an unmapped one is never decoded (restricted vocabulary)."""
    prior = CausalLMPrior.from_pretrained(str(lm_dir), target_tokenizer=target_tokenizer, mapping="one_to_one")
    table = torch.randn(len(TARGET_VOCAB), D, generator=torch.Generator().manual_seed(1))
    tid = target_tokenizer.convert_tokens_to_ids
    ids = torch.tensor([tid(w) for w in ("the", "patient", "has", "a", "fever", ",", "zyx")])
    config = BeamCleanConfig(beam_width=3, candidates=8, excluded_ids=prior.excluded_ids)
    out = beamclean_attack(table[ids] + 0.01, table, prior, threat=GRANT, family="gaussian", config=config)
    assert out.ids[0][:-1].tolist() == ids[:-1].tolist()
    assert out.ids[0][-1] != tid("zyx") and int(out.ids[0][-1]) in prior.token_mapping.target_ids.tolist()


# -------------------------------------------------------------------------------------------- the cell kind
@pytest.fixture(scope="module")
def target_table_dir(tmp_path_factory, target_tokenizer):
    """A BERT whose input embedding table (N(0, 1), d = 16) is over TARGET_VOCAB."""
    from transformers import BertConfig, BertModel

    out = tmp_path_factory.mktemp("tiny-target")
    config = BertConfig(
        vocab_size=len(TARGET_VOCAB),
        hidden_size=D,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = BertModel(config)
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.copy_(
            torch.randn(len(TARGET_VOCAB), D, generator=torch.Generator().manual_seed(1))
        )
    model.save_pretrained(out)
    target_tokenizer.save_pretrained(out)
    return str(out)


def _cell(encoder: str, prior: dict) -> dict:
    return {
        "name": "cross_prior_test",
        "kind": "token_inversion",
        "texts": ["the patient has a fever , and a cough .", "the patient has zyx pain monday"],
        "encoder": encoder,
        "mechanism": {"name": "gaussian", "sigma": 0.01},
        "params": {"threads": 1},
        "attack": {
            "threat": {"embedding_table": True, "training_text": "public", "knows_mechanism": True},
            "attacks": ["nn_l2", "beamclean"],
            "beamclean": {"beam_width": 3, "candidates": 8, "noise": ["estimated"]},
            "prior": prior,
        },
        "seeds": [0],
    }


def test_the_cell_kind_runs_the_one_to_one_prior(target_table_dir, lm_dir, tmp_path):
    prior = {"kind": "causal_lm", "path": str(lm_dir), "mapping": "one_to_one", "unmapped_mass": 0}
    path = run_cell(_cell(target_table_dir, prior), tmp_path, progress=False)
    (result,) = json.loads(path.read_text())["results"]
    m = {k: v["mean"] for k, v in result["metrics"].items()}
    # 16 scored tokens, one of them ("zyx") unmapped: it bounds BeamClean at 15 / 16
    assert m["n_tokens"] == 16 and m["prior_coverage"] == 15 / 16
    assert m["recovery_nn_best"] == 1.0 and m["recovery_beamclean_estimated"] == 15 / 16


@pytest.mark.parametrize(
    ("prior", "field", "bad"),
    [
        ({"mapping": "two_to_one"}, "attack.prior.mapping", "two_to_one"),
        ({"mapping": "one_to_one", "unmapped_mass": 1.5}, "attack.prior.unmapped_mass", "1.5"),
        ({"unmapped_mass": 0.1}, "attack.prior.unmapped_mass", "first_subtoken"),
    ],
)
def test_the_cell_spec_names_a_bad_prior_setting(prior, field, bad):
    from textfree.experiments.kinds.attacks import parse_attack_section

    section = _cell("default", {"kind": "causal_lm", "path": "some/lm", **prior})["attack"]
    with pytest.raises(CellError, match=bad) as info:
        parse_attack_section(section)
    assert info.value.field == field


@pytest.mark.shared_data
def test_mrpc_pairs_give_both_sentences_as_texts(shared_data):
    from textfree.data import load_dataset
    from textfree.experiments import Cell
    from textfree.experiments.kinds.attacks import _cell_texts

    cell = Cell.from_dict(
        {
            "name": "mrpc_texts",
            "kind": "token_inversion",
            "dataset": "mrpc",
            "split": "test",
            "limit": 4,
            "encoder": "default",
            "mechanism": {"name": "l2_laplace", "epsilon": 50},
            "attack": {"threat": {"embedding_table": True}, "attacks": ["nn_l2"]},
            "seeds": [0],
        }
    )
    first, second = load_dataset("mrpc", split="test")[:2]
    assert _cell_texts(cell) == [first.text_a, first.text_b, second.text_a, second.text_b]


# ---------------------------------------------------------------------------------------------------- report
def _curve(name, prior, nn, bc, coverage=None):
    from textfree.attacks.report import Curve, Point

    points = []
    for x, n, b in zip((35, 50), nn, bc):
        values = {"recovery_nn_best": n, "recovery_beamclean_estimated": b, "epsilon_unit": [x] * len(n)}
        values["n_tokens"] = [600.0] * len(n)
        if coverage is not None:
            values["prior_coverage"] = [coverage] * len(n)
        points.append(Point(x, values))
    attack = {"attacks": ["nn_l2", "beamclean"], "prior": prior}
    return Curve(
        name, {"name": "l2_laplace"}, "mechanism.epsilon", points, f"{name}.json", "d", None, [0, 1], attack, "mrpc"
    )


def test_report_puts_cross_model_beside_same_tokenizer_nn_and_the_paper():
    from textfree.attacks.report import cross_prior_section, is_cross_prior

    cross = _curve(
        "x_cross",
        {"kind": "causal_lm", "path": "runs/p/decoder", "mapping": "one_to_one"},
        [[0.02, 0.04], [0.15, 0.17]],
        [[0.10, 0.14], [0.30, 0.34]],
        coverage=0.84,
    )
    same = _curve(
        "x_bigram", {"kind": "bigram", "sources": []}, [[0.02, 0.04], [0.15, 0.17]], [[0.08, 0.1], [0.25, 0.27]]
    )
    other = _curve("x_first", {"kind": "causal_lm", "path": "p"}, [[0.5, 0.5]] * 2, [[0.5, 0.5]] * 2)
    assert is_cross_prior(cross) and not is_cross_prior(same) and not is_cross_prior(other)
    assert cross_prior_section([same, other]) == []
    text = "\n".join(cross_prior_section([cross, same, other]))
    assert "**met**: at epsilon 35 NN recovers 3.0% and BeamClean (estimated noise) 12.0%: 4.00x" in text
    assert "| 35 | 35 | 3.0 ± 1.4 | 9.0 ± 1.4 | 12.0 ± 2.8 | 4.00x | 3.00x | 84.0% | — |" in text
    assert "BeamClean, same tokenizer (`x_bigram`)" in text and "x_first" not in text
    assert "| 77 | 4.53x |" in text and "17" in text
    assert "differs" not in text
