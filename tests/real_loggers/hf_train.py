"""Hugging Face transformers' Trainer, training a tiny PyTorch model with evaluation each epoch.
Arguments: RECORD.json OUTPUT_DIR LOGGER: "bar" logs through ProgressCallback (tqdm bars, the
default), "printer" through PrinterCallback (disable_tqdm=True). RECORD gets the Trainer's
state.log_history."""

import json
import sys

import torch
from transformers import Trainer, TrainingArguments, set_seed


class Regression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)

    def forward(self, x, labels=None):
        out = self.linear(x).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


record_path, output_dir, logger = sys.argv[1:4]
set_seed(0)
data = [{"x": torch.rand(3), "labels": torch.tensor(float(i % 3))} for i in range(24)]
args = TrainingArguments(
    output_dir=output_dir, num_train_epochs=2, per_device_train_batch_size=4, per_device_eval_batch_size=4,
    logging_steps=2, eval_strategy="epoch", save_strategy="no", report_to=[], use_cpu=True,
    learning_rate=0.05, disable_tqdm=logger == "printer",
)
trainer = Trainer(model=Regression(), args=args, train_dataset=data[:16], eval_dataset=data[16:])
trainer.train()
with open(record_path, "w") as out:
    json.dump(trainer.state.log_history, out)
