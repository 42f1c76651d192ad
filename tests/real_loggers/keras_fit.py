"""Keras 3's model.fit (PyTorch backend) with validation data, its default progress bar (verbose
"auto", which is 1) or verbose=2, and with "evaluate" model.evaluate on the validation data after it, as
Keras's guides do. Arguments: RECORD.json VERBOSE [evaluate]. RECORD gets the logs fit gave its
callbacks at each step and epoch end (the values its progress bar prints) and evaluate's result."""

import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402


class Record(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps, self.epochs = [], []

    def on_train_batch_end(self, batch, logs=None):
        # the bar redraws at most every 0.05 s: waiting makes it draw every step, as real steps would
        time.sleep(0.06)
        self.steps.append({name: float(value) for name, value in logs.items()})

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append({name: float(value) for name, value in logs.items()})


record_path, verbose, then = sys.argv[1], sys.argv[2], sys.argv[3:]
keras.utils.set_random_seed(0)
x = np.random.rand(64, 3).astype("float32")
y = (x.sum(axis=1) > 1.5).astype("float32")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="sgd", loss="binary_crossentropy", metrics=["accuracy"])
record = Record()
model.fit(
    x[:48], y[:48], batch_size=12, epochs=3, validation_data=(x[48:], y[48:]), callbacks=[record],
    verbose="auto" if verbose == "auto" else int(verbose),
)
evaluated = model.evaluate(x[48:], y[48:], return_dict=True) if then == ["evaluate"] else {}
evaluated = {name: float(value) for name, value in evaluated.items()}
with open(record_path, "w") as out:
    json.dump({"steps": record.steps, "epochs": record.epochs, "evaluated": evaluated}, out)
