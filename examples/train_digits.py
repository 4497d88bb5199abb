"""A user's training script, as nestor runs it as a command trainer.

nestor passes each hyperparameter as --name=value and reads the last "FoM: x"
line it prints. Runs as it stands: python train_digits.py --lr=0.01 --hidden=64
"""
import argparse

from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--hidden", type=int, default=64)
parser.add_argument("--epochs", type=int, default=20)
args = parser.parse_args()

x, y = load_digits(return_X_y=True)
x_train, x_val, y_train, y_val = train_test_split(x / 16.0, y, test_size=0.25, random_state=0)
model = MLPClassifier((args.hidden,), learning_rate_init=args.lr, random_state=0)
for _ in range(args.epochs):
    model.partial_fit(x_train, y_train, classes=range(10))
    print(f"FoM: {model.score(x_val, y_val):.4f}", flush=True)  # one per epoch: ASHA can prune
