"""Transitional: reconcile.py's old import path; the serving builders are in specdec.builders.serving."""

from specdec.builders.serving import (build_cache_claim, build_config_map, build_deployment,  # noqa: F401
                                      build_service, config_map_name, endpoint, runtime_name, selector_labels)
