"""Read back what a tracker wrote, offline: TensorBoard event files (tensorboard's own event reader) and a W&B
offline run (its ``.wandb`` record log, parsed with wandb's protobuf definitions, and its media files)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Iterator

# The .wandb file: a 7-byte header (":W&B", magic 0xBEE1, version), then LevelDB-log records in 32 KiB blocks
# (7-byte record header: crc32, length, type; FULL=1, FIRST=2, MIDDLE=3, LAST=4; a block tail under 7 bytes is
# zero padding). wandb 0.31 ships no Python reader of its own any more.
_BLOCK = 32768
_HEADER = 7


def tensorboard_texts(logdir: str | Path) -> dict[str, dict[int, str]]:
    """Every text summary under ``logdir`` (all event files, recursively): ``{tag: {step: text}}``, the tag
    without torch's ``/text_summary`` suffix."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # lazy: tensorboard
    from tensorboard.util import tensor_util  # lazy: tensorboard

    out: dict[str, dict[int, str]] = {}
    for events in sorted(Path(logdir).rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"tensors": 0})
        acc.Reload()
        for tag in acc.Tags().get("tensors", []):
            for ev in acc.Tensors(tag):
                value = tensor_util.make_ndarray(ev.tensor_proto).reshape(-1)[0]
                text = value.decode("utf-8") if isinstance(value, bytes) else str(value)
                out.setdefault(tag.removesuffix("/text_summary"), {})[int(ev.step)] = text
    return out


def tensorboard_scalars(logdir: str | Path) -> dict[str, dict[int, float]]:
    """Every scalar under ``logdir``: ``{tag: {step: value}}``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # lazy: tensorboard

    out: dict[str, dict[int, float]] = {}
    for events in sorted(Path(logdir).rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            out.setdefault(tag, {}).update({int(e.step): float(e.value) for e in acc.Scalars(tag)})
    return out


def _wandb_payloads(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file (no :W&B header)")
    pos, pending = _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + _HEADER])
        if kind == 0 and length == 0:
            pos += left  # zero padding to the end of the block
            continue
        chunk = data[pos + _HEADER:pos + _HEADER + length]
        pos += _HEADER + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk
            pending = b""


def wandb_history(run_dir: str | Path) -> list[dict[str, Any]]:
    """The history rows of a W&B offline run folder (``.../wandb/offline-run-*``), values JSON-decoded; a
    media value is its reference dict (``{"_type": "table-file", "path": "media/table/..."}``)."""
    from wandb.proto import wandb_internal_pb2 as pb  # lazy: wandb

    run_file = next(Path(run_dir).glob("*.wandb"))
    rows = []
    for payload in _wandb_payloads(run_file):
        record = pb.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") != "history":
            continue
        rows.append({(item.key or "/".join(item.nested_key)): json.loads(item.value_json)
                     for item in record.history.item})
    return rows


def wandb_media(run_dir: str | Path, ref: dict[str, Any]) -> Any:
    """The content of a media reference from :func:`wandb_history`: a table's ``{"columns", "data"}`` or an
    HTML file's text."""
    path = Path(run_dir) / "files" / ref["path"]
    return json.loads(path.read_text()) if path.suffix == ".json" else path.read_text()


def wandb_flushed() -> None:
    """Finish the current W&B run and stop W&B's service process, which writes the offline run's records: after
    this every record is on disk (read right after ``finish`` alone, a loaded machine can still be writing)."""
    import wandb  # lazy: wandb

    if wandb.run is not None:
        wandb.finish()
    wandb.teardown()


def wandb_offline_runs(wandb_dir: str | Path) -> list[Path]:
    """The offline run folders under a ``WANDB_DIR``."""
    return sorted(Path(wandb_dir).rglob("offline-run-*"))


__all__ = ["tensorboard_scalars", "tensorboard_texts", "wandb_flushed", "wandb_history", "wandb_media",
           "wandb_offline_runs"]
