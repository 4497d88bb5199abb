"""What runs inside one trial: datasets, models and the Horovod training loop."""
