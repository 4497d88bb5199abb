"""The scheduling loop (`workflow`), the trial runner (`trials`), fixed plans,
stopping and the stage kinds (`kinds/`). It writes the
journal and runs attempts on a backend; it knows nothing of commands.
"""
