"""The Ray backend: warm Horovod gangs (`gangs`), the backend on them (`backend`),
and the Ray actors and tasks the driver uses (progress heartbeats, early stopping,
the run directory's visibility check). The one place that may import Ray.
"""
