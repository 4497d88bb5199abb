"""A user's training function, as nestor calls it: train(config, ctx) -> metrics.

config holds the trial's hyperparameters and settings; ctx.report() sends
per-epoch results (what early stopping and ASHA judge); ctx.checkpoint_dir is
the trial's own folder for files it keeps.
"""
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier


def train(config: dict, ctx) -> dict:
    x, y = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(x / 16.0, y, test_size=0.25,
                                                      random_state=0)
    model = MLPClassifier((config["hidden"],), learning_rate_init=config["lr"],
                          random_state=0)
    for epoch in range(config["epochs"]):
        model.partial_fit(x_train, y_train, classes=range(10))
        ctx.report({"val_accuracy": model.score(x_val, y_val)}, step=epoch + 1)
    return {"val_accuracy": model.score(x_val, y_val)}
