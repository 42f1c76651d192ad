"""scikit-learn's grid search at verbose=3 with the training scores kept, as a sweep prints it:
"[CV 1/3] END ...C=0.1;, score=(train=0.960, test=0.940) total time=   0.0s", then the same with two
scorers ("accuracy: (train=..., test=...) f1_macro: (train=..., test=...)"). Argument: RECORD, where
the scores the search computed are written, in the order it printed them (candidate by candidate,
each candidate's folds in order)."""

import json
import sys

from sklearn.datasets import load_iris
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC

features, labels = load_iris(return_X_y=True)
record = {"single": [], "multi": []}
for kind, scoring in (("single", None), ("multi", ["accuracy", "f1_macro"])):
    search = GridSearchCV(SVC(), {"C": [0.1, 1.0]}, cv=3, verbose=3, return_train_score=True, scoring=scoring,
                          refit=False if scoring else True)
    search.fit(features, labels)
    results = search.cv_results_
    names = ["score"] if scoring is None else scoring
    for candidate in range(len(results["params"])):
        for fold in range(3):
            record[kind].append({name: [float(results[f"split{fold}_{split}_{name}"][candidate]) for split in ("train", "test")]
                                 for name in names})
sys.stdout.flush()
with open(sys.argv[1], "w") as out:
    json.dump(record, out)
