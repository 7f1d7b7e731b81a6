#!/usr/bin/env python3
"""Read a trainrun run's TensorBoard events back with TensorBoard itself (tests/test_tfevents.c): the scalars as
its EventAccumulator sees them (after its purge of steps superseded by a resumed process), and the hyperparameters
as its HParams plugin's data. Prints one JSON object: {"scalars": {tag: [[step, value, wall_time], ...]},
"hparams": {key: value}, "files": N}. Usage: read_back.py RUN_DIR/tensorboard"""
import glob, json, os, sys
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import plugin_data_pb2

logdir = sys.argv[1]
acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
scalars = {tag: [[s.step, s.value, s.wall_time] for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
hparams = {}
try:
    content = acc.PluginTagToContent("hparams")
except KeyError:  # no hparams summary in the run
    content = {}
for tag, data in content.items():
    pd = plugin_data_pb2.HParamsPluginData.FromString(data)
    for k, v in pd.session_start_info.hparams.items():
        hparams[k] = getattr(v, v.WhichOneof("kind"))
print(json.dumps({"scalars": scalars, "hparams": hparams,
                  "files": len(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))}))
