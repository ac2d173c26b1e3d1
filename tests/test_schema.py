"""The one schema: every kind round-trips through MessagePack (wire) and JSON (log), and
malformed input is refused by validation, never turned into a wrong object."""

import math

import msgspec
import pytest

from pardash.telemetry import schema

SAMPLES = [
    schema.Hello(run="r", rank=3, seq=0, t=1.5, world_size=4, host="h", strategy="fsdp", params_count=10, config={"lr": 0.1, "steps": 30}),
    schema.Step(
        run="r", rank=1, seq=7, t=2.0, step=5, loss=2.5, samples=16, step_s=0.01, data_s=0.001, forward_s=0.002,
        backward_s=0.004, optimizer_s=0.001, comm_s=0.002, self_s=0.003, lr=1e-3, mono=9.0,
        mem=schema.Mem(params_bytes=100, params_full_bytes=400, grads_bytes=100, optim_bytes=200, rss_bytes=1 << 30),
        custom={"tokens": 512.0},
    ),
    schema.System(rank=0, seq=2, cpu_pct=55.0, rss_bytes=123, gpu_util_pct=None),
    schema.Event(rank=2, name="error", message="boom", traceback="Traceback...", step=4),
    schema.Event(rank=2, name="exit", code=-9),
    schema.Heartbeat(rank=0, step=12, phase="backward", phase_s=0.5, dropped=3, mono=1.0),
    schema.Verdict(rank=2, verdict="straggler", cause="data", cost_s=0.021, step=40, message="m"),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip_wire_and_log(msg):
    assert schema.decode(schema.encode(msg)) == msg
    line = schema.encode_json(msg)
    assert b"\n" not in line
    assert schema.decode_json(line) == msg


def test_log_line_has_the_documented_fields():
    step = SAMPLES[1]
    obj = msgspec.json.decode(schema.encode_json(step))
    assert obj["kind"] == "step"
    for key in ("rank", "step", "loss", "step_s", "data_s", "forward_s", "backward_s", "optimizer_s", "mem"):
        assert key in obj
    assert obj["mem"]["params_full_bytes"] == 400


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xc1\xc1",  # never-used msgpack byte
        msgspec.msgpack.encode({"kind": "nope", "rank": 0}),
        msgspec.msgpack.encode({"kind": "step", "rank": "zero"}),
        msgspec.msgpack.encode({"kind": "step", "step_s": "fast"}),
        msgspec.msgpack.encode([1, 2, 3]),
    ],
)
def test_malformed_frames_are_refused(raw):
    with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)):
        schema.decode(raw)


def test_nan_loss_survives_json_as_null_or_nan():
    # A NaN loss is information (training diverged); it must not break the log.
    line = schema.encode_json(schema.Step(rank=0, loss=math.nan))
    back = schema.decode_json(line)
    assert back.loss is None or math.isnan(back.loss)


def test_odd_values_in_a_config_are_published_in_plain_form():
    class Version(str):
        pass

    from pathlib import Path

    hello = schema.Hello(torch_version=Version("2.13.0"), config={"out": Path("/tmp/x"), "v": Version("1")})
    back = schema.decode(schema.encode(hello))
    assert back.torch_version == "2.13.0" and back.config == {"out": "/tmp/x", "v": "1"}


def test_plain_text_takes_out_whole_escape_sequences_and_keeps_what_spells_text():
    from pardash.telemetry.schema import plain_text

    # A coloured log line lost only its ESC ("[31mERROR[0m done"); a clipboard write kept its payload.
    assert plain_text("\x1b[31mERROR\x1b[0m done", lines=True) == "ERROR done"
    assert plain_text("x\x1b]52;c;aGk=\x07y") == "xy" and plain_text("t\x1b]0;title\x1b\\u") == "tu"
    # Joiners spell emoji and scripts (a family, Persian's ZWNJ); bidi overrides go.
    assert plain_text("👨\u200d👩\u200d👧") == "👨\u200d👩\u200d👧" and plain_text("می\u200cخواهم") == "می\u200cخواهم"
    assert plain_text("abc\u202edef\u2066") == "abcdef"
    # One line: breaks and tabs are a space (they glued words: "line1line2"); several: kept.
    assert plain_text("line1\n\tline2") == "line1 line2"
    assert plain_text("boom\r\nline 2\tx\r20%", lines=True) == "boom\nline 2\tx\n20%"
    assert plain_text("CJK 中文 — café", lines=True) == "CJK 中文 — café"
