# A small, real training loop (no dependencies): fit y = 3x + 0.5 by gradient descent.
import json
import os
import random
import time

random.seed(int(os.environ.get("SEED", "7")))
points = [(x / 100, 3.0 * x / 100 + 0.5 + random.gauss(0, 0.05)) for x in range(100)]
w, b, lr = 0.0, 0.0, 0.5
for epoch in range(1, 41):
    grad_w = sum((w * x + b - y) * x for x, y in points) * 2 / len(points)
    grad_b = sum((w * x + b - y) for x, y in points) * 2 / len(points)
    w, b = w - lr * grad_w, b - lr * grad_b
    loss = sum((w * x + b - y) ** 2 for x, y in points) / len(points)
    print(f"epoch {epoch:3d} loss {loss:.5f} w {w:.3f} b {b:.3f}")
    time.sleep(0.1)
with open("model.json", "w") as handle:
    json.dump({"w": w, "b": b}, handle)
print("saved model.json")
