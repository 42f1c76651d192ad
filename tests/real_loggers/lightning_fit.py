"""PyTorch Lightning's Trainer.fit with validation each epoch. Arguments: RECORD.json BAR: "tqdm"
(TQDMProgressBar) or "default" (Lightning's own choice: RichProgressBar where rich is installed,
from 2.0). RECORD gets what the progress bar was given after each training step and at each epoch's
end (its get_metrics), and the bar's total."""

import json
import sys
import time

import torch

if torch.__version__ < "2":
    # Debian's torch 1.13 on Python 3.11: importing torch.distributed's sharding fails (a dataclass
    # default Python 3.11 refuses) and Lightning imports it when distributed is available. One CPU
    # process needs none of it.
    torch.distributed.is_available = lambda: False

import pytorch_lightning as pl  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Record(pl.Callback):
    def __init__(self):
        self.steps, self.epochs = [], []

    def shown(self, trainer, pl_module):
        bar = trainer.progress_bar_callback
        return {name: float(value) for name, value in bar.get_metrics(trainer, pl_module).items()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps.append(self.shown(trainer, pl_module))
        time.sleep(0.02)

    def on_train_epoch_end(self, trainer, pl_module):
        self.epochs.append(self.shown(trainer, pl_module))


record_path, bar = sys.argv[1:3]
torch.manual_seed(0)
x = torch.rand(40, 3)
y = x.sum(dim=1)
record = Record()
callbacks = [record] + ([pl.callbacks.TQDMProgressBar()] if bar == "tqdm" else [])
trainer = pl.Trainer(
    max_epochs=2, logger=False, enable_checkpointing=False, accelerator="cpu", devices=1,
    num_sanity_val_steps=0, callbacks=callbacks,
)
trainer.fit(
    Model(),
    DataLoader(TensorDataset(x[:32], y[:32]), batch_size=8),
    DataLoader(TensorDataset(x[32:], y[32:]), batch_size=4),
)
with open(record_path, "w") as out:
    json.dump({"steps": record.steps, "epochs": record.epochs, "version": pl.__version__}, out)
