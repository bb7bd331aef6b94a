"""Compatibility shim: the engine lives in ``dagster_project.engine``."""

from dagster_project.engine import *  # noqa: F401,F403
from dagster_project.engine import __all__  # noqa: F401
