"""tqdm bars with set_postfix, as training loops draw them. Arguments: KIND [LOG]: without LOG the bars go
to stderr (tqdm's default), as in a job's log. Every redraw is drawn (mininterval=0), as a loop whose
steps take longer than tqdm's 0.1 s between redraws would draw them."""

import sys

from tqdm import tqdm

kind = sys.argv[1]
log = open(sys.argv[2], "w") if len(sys.argv) > 2 else sys.stderr

if kind == "update":  # a bar updated by hand: step k's values are drawn at n = k
    with tqdm(total=5, file=log, mininterval=0) as bar:
        for k in range(1, 6):
            bar.update(1)
            bar.set_postfix(loss=round(1.0 / k, 3), lr=3e-05 * k)
elif kind == "loop":  # `for batch in tqdm(...)`: a batch's values are drawn before n counts it
    for k in (bar := tqdm(range(5), file=log, mininterval=0)):
        bar.set_postfix(loss=round(2.0 / (k + 1), 3))
elif kind == "epochs":  # a bar per epoch, described "Epoch 1/2" as Keras counts them
    for epoch in range(2):
        for k in (bar := tqdm(range(4), desc=f"Epoch {epoch + 1}/2", file=log, mininterval=0)):
            bar.set_postfix(loss=round(epoch + (k + 1) / 10, 3))
elif kind == "lagging":  # tqdm's own pace: n drawn at most every 0.1 s, the postfix at every step
    import time

    step = 0
    for epoch, steps in enumerate((200, 380, 560)):
        for k in (bar := tqdm(range(steps), desc=f"Epoch {epoch + 1}/3", file=log)):
            # an int is drawn as it is: every value is distinct
            bar.set_postfix(loss=1000 + step, accuracy=step % 100, lr=0.0003, batch_size=64)
            step += 1
            time.sleep(0.001)
elif kind == "nested":  # an evaluation bar inside the epochs' (position=1, leave=False), as HF and Lightning draw
    for epoch in (outer := tqdm(range(3), desc="epochs", file=log)):
        for k in (inner := tqdm(range(20), desc="eval", position=1, leave=False, file=log, mininterval=0)):
            inner.set_postfix(val_loss=round(2.0 - epoch - k / 100, 3))
        outer.set_postfix(loss=round(1.0 / (epoch + 1), 3))
        tqdm.write(f"epoch {epoch} done", file=log)
elif kind == "epochs-bar":  # a bar over the epochs, its batches' bar nested in it (each epoch longer than 0.1 s)
    for epoch in (outer := tqdm(range(3), desc="Epochs", file=log, mininterval=0)):
        for k in (inner := tqdm(range(10), desc="Training", position=1, leave=False, file=log, mininterval=0)):
            inner.set_postfix(loss=round(3.0 - epoch - k / 10, 3))
else:
    raise SystemExit(f"unknown kind {kind!r}")
log.flush()
