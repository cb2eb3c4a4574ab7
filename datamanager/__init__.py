"""The Data Manager: a tf.data service per job, its pipelines, and data validation.

The flow calls :func:`validate_data` before any trial, :func:`start_data_service` to start the
job's service, and :meth:`DataServiceHandle.stop` in ``finalize``; trials read from it with
:mod:`ultron.data`. Importing this package loads neither TensorFlow nor great-expectations.
"""

from __future__ import annotations

from ultron.datamanager.errors import DataServiceError, DataValidationError, ExpectationFailure
from ultron.datamanager.service import DataServiceHandle, LocalDataService, start_data_service
from ultron.datamanager.spec import DataSpec, Expectation, FeatureSpec
from ultron.datamanager.validation import validate_data

__all__ = [
    "DataServiceError",
    "DataServiceHandle",
    "DataSpec",
    "DataValidationError",
    "Expectation",
    "ExpectationFailure",
    "FeatureSpec",
    "LocalDataService",
    "start_data_service",
    "validate_data",
]
