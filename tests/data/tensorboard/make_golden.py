#!/usr/bin/env python3
"""Regenerate golden.tfevents (tests/test_tfevents.c) with TensorBoard's own protocol buffers and record writer,
from the TensorBoard venv scripts/setup.sh makes:
  ${XDG_CACHE_HOME:-~/.cache}/trainrun/tensorboard-venv/bin/python tests/data/tensorboard/make_golden.py
The events are the ones the C test writes with tfevents.c: a file header, a SessionLog START, the hyperparameters
(keys sorted: TensorBoard serializes maps deterministically that way) and two scalar events. Also prints the CRC-32C
values the test checks, from TensorBoard's crc32c."""
import io, os
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c, masked_crc32c
from tensorboard.plugins.hparams import metadata, plugin_data_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

W = 1700000000.25
buf = io.BytesIO()
rw = RecordWriter(buf)
def put(ev):
    rw.write(ev.SerializeToString(deterministic=True))
put(event_pb2.Event(wall_time=W, file_version="brain.Event:2",
                    source_metadata=event_pb2.SourceMetadata(writer="trainrun")))
put(event_pb2.Event(wall_time=W, step=41, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))
ssi = plugin_data_pb2.SessionStartInfo(start_time_secs=W)
ssi.hparams["data.format"].string_value = "image_folder"
ssi.hparams["optim.lr"].number_value = 0.001
ssi.hparams["data.shuffle"].bool_value = True
content = plugin_data_pb2.HParamsPluginData(version=0, session_start_info=ssi).SerializeToString(deterministic=True)
smd = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="hparams",
                                                                                     content=content))
put(event_pb2.Event(wall_time=W, summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(
    tag=metadata.SESSION_START_INFO_TAG, metadata=smd, tensor=metadata.NULL_TENSOR)])))
put(event_pb2.Event(wall_time=W + 1.5, step=50, summary=summary_pb2.Summary(value=[
    summary_pb2.Summary.Value(tag="train/loss", simple_value=0.693359375),
    summary_pb2.Summary.Value(tag="train/accuracy", simple_value=0.75)])))
put(event_pb2.Event(wall_time=W + 2.0, step=100, summary=summary_pb2.Summary(value=[
    summary_pb2.Summary.Value(tag="val/loss", simple_value=1.0 / 3.0)])))
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.tfevents")
open(out, "wb").write(buf.getvalue())
print(out, len(buf.getvalue()), "bytes")
for data in [b"123456789", bytes(32), b"\xff" * 32, bytes(range(32)), bytes(range(31, -1, -1)), b""]:
    print(data[:9], hex(crc32c(data)), hex(masked_crc32c(data)))
