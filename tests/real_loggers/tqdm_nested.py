"""Real tqdm nested bars, as Hugging Face's evaluation bar and Lightning's validation bar draw them:
an outer bar over epochs and an inner one (`position=1, leave=False`) over batches, with lines
printed between (tqdm.write, and print once the bars are closed). Arguments: EPOCHS BATCHES."""

import sys
import time

from tqdm import tqdm

epochs, batches = int(sys.argv[1]), int(sys.argv[2])
for epoch in tqdm(range(epochs), desc="epoch", mininterval=0):
    for batch in tqdm(range(batches), desc="batch", position=1, leave=False, mininterval=0):
        time.sleep(0.001)
    tqdm.write(f"epoch {epoch} loss={1 / (epoch + 1):.4f}")
print("done")
