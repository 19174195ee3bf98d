import json
import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save as st_save

from textfree.mechanisms import Clipped, Gaussian, L2Laplace, SlotPrivatization
from textfree.payload import MAX_ROWS, EncoderInfo, Payload, PayloadError, PayloadTooLarge

ENC = EncoderInfo("tiny/encoder", "a" * 64, 8, "contextual")


def make_payload(noise=L2Laplace(75.0), lengths=(3, 1), d=8, seed=0, **kw):
    sp = SlotPrivatization(noise, k=4)
    s = max(lengths)
    h = torch.randn(len(lengths), s * 4, d, generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(len(lengths), s * 4, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, : n * 4] = 1
    v, m = sp.apply(h, mask, generator=torch.Generator().manual_seed(seed) if noise else None)
    return Payload(v, m, EncoderInfo("tiny/encoder", "a" * 64, d, "contextual"), sp, **kw)


def rebuild(data: bytes, mutate) -> bytes:
    """Re-serialise a payload after editing its textfree header with ``mutate(header)``."""
    p = Payload.from_bytes(data)
    header = p.header()
    mutate(header)
    return st_save({"vectors": p.vectors, "mask": p.mask}, metadata={"textfree": json.dumps(header)})


def test_round_trip_is_exact(tmp_path):
    p = make_payload(public=["Options: A. x", "Options: B. y"], extra={"client": "test"})
    q = Payload.load(p.save(tmp_path / "p.safetensors"))
    assert torch.equal(p.vectors, q.vectors) and torch.equal(p.mask, q.mask)
    assert q.header() == p.header()
    assert q.privatization == p.privatization and q.encoder == p.encoder
    assert Payload.from_base64(p.to_base64()).header() == p.header()


def test_header_states_privacy():
    h = make_payload(lengths=(3, 1)).header()
    assert h["privacy"]["slot"]["epsilon"] == 150.0
    assert h["privacy"]["worst_case_row"]["epsilon"] == 450.0
    assert h["lengths"] == [3, 1] and h["shape"] == [2, 3, 8]


def test_gaussian_and_clipped_payloads_round_trip():
    for noise in (Gaussian(0.1), Clipped(L2Laplace(30.0), 1.2)):
        p = make_payload(noise=noise)
        assert Payload.from_bytes(p.to_bytes()).privatization.noise == noise


@pytest.mark.parametrize("cut", [0, 5, 8, 40, -1, -17])
def test_truncated_payload_is_rejected(cut):
    data = make_payload().to_bytes()
    with pytest.raises(PayloadError, match="truncated|header|JSON|gaps|read"):
        Payload.from_bytes(data[:cut])


def test_garbage_and_oversized_are_rejected():
    with pytest.raises(PayloadError):
        Payload.from_bytes(b"\x00" * 100)
    with pytest.raises(PayloadError, match="header length"):
        Payload.from_bytes(struct.pack("<Q", 2**40) + b"{}")
    data = make_payload().to_bytes()
    with pytest.raises(PayloadError, match="above the limit"):
        Payload.from_bytes(data, max_bytes=len(data) - 1)
    with pytest.raises(PayloadError, match="bytes"):
        Payload.from_bytes("not bytes")
    with pytest.raises(PayloadError, match="base64"):
        Payload.from_base64("%%%")


def test_wrong_dtype_and_extra_tensors_are_rejected():
    p = make_payload()
    meta = {"textfree": json.dumps(p.header())}
    with pytest.raises(PayloadError, match="F32, F16 or BF16"):
        Payload.from_bytes(st_save({"vectors": p.vectors.to(torch.float64), "mask": p.mask}, metadata=meta))
    with pytest.raises(PayloadError, match="BOOL"):
        Payload.from_bytes(st_save({"vectors": p.vectors, "mask": p.mask.to(torch.uint8)}, metadata=meta))
    with pytest.raises(PayloadError, match="exactly the tensors"):
        Payload.from_bytes(
            st_save(
                {"vectors": p.vectors, "mask": p.mask, "input_ids": torch.zeros(2, 3, dtype=torch.long)}, metadata=meta
            )
        )
    with pytest.raises(PayloadError, match="no 'textfree' header"):
        Payload.from_bytes(st_save({"vectors": p.vectors, "mask": p.mask}))


def test_nan_inf_and_out_of_range_norms_are_rejected():
    p = make_payload()
    for bad_value in (float("nan"), float("inf")):
        v = p.vectors.clone()
        v[0, 0, 0] = bad_value
        with pytest.raises(PayloadError, match="NaN or Inf"):
            Payload.from_bytes(st_save({"vectors": v, "mask": p.mask}, metadata={"textfree": json.dumps(p.header())}))
    v = p.vectors.clone() * 3.0  # the header says unit-norm slots
    with pytest.raises(PayloadError, match="unit-norm"):
        Payload.from_bytes(st_save({"vectors": v, "mask": p.mask}, metadata={"textfree": json.dumps(p.header())}))
    v = p.vectors.clone()
    v[1, 2, 0] = 0.5  # a padded slot carries data
    with pytest.raises(PayloadError, match="padded"):
        Payload.from_bytes(st_save({"vectors": v, "mask": p.mask}, metadata={"textfree": json.dumps(p.header())}))


def test_clipped_payload_norm_bound_is_enforced():
    sp = SlotPrivatization(Clipped(L2Laplace(30.0), 1.2), k=1, normalize=False, renormalize=False, sensitivity=2.4)
    v = torch.ones(1, 2, 8)  # norm 2.83 > 1.2
    with pytest.raises(PayloadError, match="above the bound"):
        Payload(v, torch.ones(1, 2, dtype=torch.bool), ENC, sp, kind="token")


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda h: h.update(shape=[2, 3, 9]), "shape"),
        (lambda h: h.update(lengths=[3, 3]), "lengths"),
        (lambda h: h.update(dtype="float16"), "dtype"),
        (lambda h: h.update(format_version=99), "format_version"),
        (lambda h: h.update(format="other"), "format"),
        (lambda h: h.update(secret="x"), "unknown header"),
        (lambda h: h["privacy"]["slot"].update(epsilon=1.0), "inconsistent"),
        (lambda h: h["privatization"].update(noise={"name": "l2_laplace", "epsilon": -3}), "privatization"),
        (lambda h: h["privatization"].update(noise={"name": "pickle", "x": 1}), "unknown mechanism"),
        (lambda h: h["encoder"].update(dim=9), "encoder.dim"),
        (lambda h: h["encoder"].update(sha256="zz"), "sha256"),
        (lambda h: h.update(kind="text"), "kind"),
        (lambda h: h.update(public="clear text"), "public"),
    ],
)
def test_inconsistent_headers_are_rejected(mutate, match):
    data = make_payload().to_bytes()
    with pytest.raises(PayloadError, match=match):
        Payload.from_bytes(rebuild(data, mutate))


def _with_safetensors_header(data: bytes, edit) -> bytes:
    """``data`` with its raw safetensors JSON header replaced by ``edit(header text)`` (offsets left as they are)."""
    (hlen,) = struct.unpack("<Q", data[:8])
    text = edit(data[8 : 8 + hlen].decode("utf-8")).encode("utf-8")
    return struct.pack("<Q", len(text)) + text + data[8 + hlen :]


def _hostile_headers() -> list[tuple[str, bytes]]:
    data = make_payload().to_bytes()
    big = "1" + "0" * 5000  # above Python's 4,300-digit int parsing limit: ValueError in json.loads
    deep = "[" * 3000 + "]" * 3000  # RecursionError in json.loads

    def outer(value: str) -> bytes:
        """A field ``x`` added to the safetensors header (its padding spaces stripped first)."""
        return _with_safetensors_header(data, lambda h: h.rstrip()[:-1] + f',"x":{value}}}')

    def inner(mark, value: str) -> bytes:
        """A value put into the textfree header, a JSON string inside the safetensors header (its quotes escaped)."""
        return _with_safetensors_header(rebuild(data, mark), lambda h: h.replace('\\"MARK\\"', value))

    in_noise = lambda h: h["privatization"]["noise"].update(epsilon="MARK")  # noqa: E731
    in_privacy = lambda h: h["privacy"]["slot"].update(epsilon="MARK")  # noqa: E731
    in_extra = lambda h: h.update(extra={"x": "MARK"})  # noqa: E731
    return [
        ("dtype not a string", _with_safetensors_header(data, lambda h: h.replace('"dtype":"F32"', '"dtype":["F32"]'))),
        ("5000-digit int in the safetensors header", outer(big)),
        ("nested 3000 deep in the safetensors header", outer(deep)),
        ("5000-digit int in the textfree header", inner(in_extra, big)),
        ("nested 3000 deep in the textfree header", inner(in_extra, deep)),
        ("mechanism epsilon 10**400", inner(in_noise, "1" + "0" * 400)),
        ("stated privacy 10**400", inner(in_privacy, "1" + "0" * 400)),
    ]


@pytest.mark.parametrize("name,blob", _hostile_headers(), ids=[n for n, _ in _hostile_headers()])
def test_hostile_headers_are_payload_errors_not_crashes(name, blob):
    """Values that get past the per-field checks (huge integers, deep nesting, wrong JSON types) are still bad payloads
    (a server answers 400), never TypeError / ValueError / OverflowError / RecursionError escaping as a 500."""
    with pytest.raises(PayloadError):
        Payload.from_bytes(blob)


def test_load_of_a_directory_is_a_payload_error(tmp_path):
    with pytest.raises(PayloadError, match="cannot read payload file"):
        Payload.load(tmp_path)


def test_non_prefix_mask_is_rejected():
    p = make_payload()
    m = p.mask.clone()
    m[1] = torch.tensor([False, True, False])
    with pytest.raises(PayloadError, match="prefixes"):
        Payload(p.vectors, m, p.encoder, p.privatization)


VALID = make_payload().to_bytes()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_only_payload_errors(data):
    """Random bytes and random corruptions of a valid payload raise PayloadError, never anything else."""
    choice = data.draw(st.integers(0, 2))
    if choice == 0:
        blob = data.draw(st.binary(max_size=400))
    elif choice == 1:
        blob = bytearray(VALID)
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] = data.draw(st.integers(0, 255))
        blob = bytes(blob)
    else:
        blob = VALID[: data.draw(st.integers(0, len(VALID)))] + data.draw(st.binary(max_size=50))
    try:
        p = Payload.from_bytes(blob)
    except PayloadError:
        return
    # A corruption that still parses must still be a fully valid payload.
    p.validate()


# ---------------------------------------------------------------------------------------------- cost of many rows
def _many_rows(rows: int, noise=Gaussian(1.0)) -> bytes:
    """A valid payload of ``rows`` one-slot rows of width 1, framed by hand (building it with Payload would compute
    its privacy the way the parser does)."""
    one = Payload(
        torch.ones(1, 1, 1), torch.ones(1, 1, dtype=torch.bool), EncoderInfo("x", None, 1), SlotPrivatization(noise)
    )
    header = {**one.header(), "shape": [rows, 1, 1], "lengths": [1] * rows}
    tensors = {"vectors": torch.ones(rows, 1, 1), "mask": torch.ones(rows, 1, dtype=torch.bool)}
    return st_save(tensors, metadata={"textfree": json.dumps(header)})


def _count_privacy_maps(monkeypatch) -> list[float]:
    calls = []
    real = Gaussian.privacy_loss

    def counted(self, d_in):
        calls.append(d_in)
        return real(self, d_in)

    monkeypatch.setattr(Gaussian, "privacy_loss", counted)
    return calls


def test_too_many_rows_is_refused_from_the_safetensors_header_before_any_per_row_work(monkeypatch):
    data = _many_rows(100_000)
    calls = _count_privacy_maps(monkeypatch)
    with pytest.raises(PayloadTooLarge, match="100000 rows; at most 32") as info:
        Payload.from_bytes(data, max_rows=32)
    assert (info.value.rows, info.value.limit) == (100_000, 32)
    assert isinstance(info.value, PayloadError) and calls == []  # no privacy loss was computed
    with pytest.raises(PayloadTooLarge):
        Payload.from_bytes(_many_rows(MAX_ROWS + 1))  # the format's own bound, whatever max_rows asks


def test_the_privacy_loss_of_many_rows_is_computed_once_per_parameter_set(monkeypatch):
    """100,000 one-slot Gaussian rows: the mechanism's privacy map (a bisection) runs a bounded number of times, not
    once per row, and the rows' losses are the mechanism's."""
    data = _many_rows(100_000)
    calls = _count_privacy_maps(monkeypatch)
    p = Payload.from_bytes(data)
    assert p.batch_size == 100_000
    assert len(calls) <= 4, len(calls)  # the slot loss and the worst row's, each parse or header pass
    losses = p.row_losses()
    assert len(losses) == 100_000 and losses[0] == losses[-1] == p.privatization.prompt_loss(1)
    mixed = make_payload(noise=Gaussian(0.5), lengths=(3, 1, 3, 2))
    assert mixed.row_losses() == [mixed.privatization.prompt_loss(n) for n in (3, 1, 3, 2)]
    assert mixed.worst_case_loss() == mixed.privatization.prompt_loss(3)


def test_shape_limits_are_read_from_the_safetensors_header():
    v, m = torch.ones(1, 1, 1), torch.ones(1, 1, dtype=torch.bool)
    one = Payload(v, m, EncoderInfo("x", None, 1), SlotPrivatization(L2Laplace(10.0)))
    header = json.dumps(one.header())
    with pytest.raises(PayloadError, match="outside limits"):  # zero rows
        Payload.from_bytes(
            st_save(
                {"vectors": torch.ones(0, 1, 1), "mask": torch.ones(0, 1, dtype=torch.bool)},
                metadata={"textfree": header},
            )
        )
    with pytest.raises(PayloadError, match="outside limits"):  # width 0
        Payload.from_bytes(st_save({"vectors": torch.ones(1, 1, 0), "mask": m}, metadata={"textfree": header}))
