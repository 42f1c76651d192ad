"""A moto server on 127.0.0.1 for the SageMaker tests, with test-only shims where moto falls short.

moto marks a training job Completed the moment it is created, has no
StopTrainingJob, and drops Environment; the shims below make a new job
InProgress, implement StopTrainingJob (InProgress -> Stopping), record every
CreateTrainingJob request as the server received it, and let a test move a job
to any status, inject throttling, and write CloudWatch log events.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.exceptions import JsonRESTError
from moto.core.responses import EmptyResult
from moto.sagemaker.exceptions import ValidationError
from moto.sagemaker.models import sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse
from moto.server import ThreadedMotoServer

REGION = "us-east-1"


class MotoSageMaker:
    def __init__(self):
        self.create_requests: list[dict] = []
        self.describe_calls = 0
        self.throttle_next = 0
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._install_shims()

    def start(self) -> str:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self.endpoint

    def stop(self) -> None:
        self.server.stop()

    def _install_shims(self) -> None:
        shim = self
        create, describe = SageMakerResponse.create_training_job, SageMakerResponse.describe_training_job

        def create_training_job(response):
            shim.create_requests.append(json.loads(response.body))
            result = create(response)
            name = json.loads(response.body)["TrainingJobName"]
            shim.set_status(name, "InProgress", "Starting", training_end_time=None, model_artifacts=None)
            return result

        def describe_training_job(response):
            shim.describe_calls += 1
            if shim.throttle_next > 0:
                shim.throttle_next -= 1
                raise JsonRESTError("ThrottlingException", "Rate exceeded")
            return describe(response)

        def stop_training_job(response):
            name = response._get_param("TrainingJobName")
            jobs = response.sagemaker_backend.training_jobs
            if name not in jobs:
                raise ValidationError(message=f"Requested resource not found: {name}")
            if jobs[name].training_job_status != "InProgress":
                raise ValidationError(message=f"The training job {name} is not in InProgress state")
            shim.set_status(name, "Stopping")
            return EmptyResult()

        SageMakerResponse.create_training_job = create_training_job
        SageMakerResponse.describe_training_job = describe_training_job
        SageMakerResponse.stop_training_job = stop_training_job

    def job(self, name: str):
        return sagemaker_backends[DEFAULT_ACCOUNT_ID][REGION].training_jobs[name]

    def set_status(self, name: str, status: str, secondary: str | None = None, **attributes) -> None:
        job = self.job(name)
        job.training_job_status = status
        job.secondary_status = secondary or status
        job.last_modified_time = dt.datetime.now(dt.timezone.utc)
        for key, value in attributes.items():
            setattr(job, key, value)
