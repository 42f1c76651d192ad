"""A moto server on 127.0.0.1 for the SageMaker tests, with test-only shims where moto falls short.

moto marks a training job Completed the moment it is created, has no
StopTrainingJob, and drops Environment; the shims below make a new job
InProgress, implement StopTrainingJob (InProgress -> Stopping, and Stopped
after `stopping_describes` looks if set), record every
CreateTrainingJob request as the server received it, and let a test move a job
to any status, inject throttling, and write CloudWatch log events.

FakeCredentialServer stands in for the endpoints that hand out AWS credentials
(container credentials, instance metadata, STS, the SSO portal).
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
        self.stopping: dict[str, int] = {}  # a stopped job's describe calls left before it is Stopped
        self.stopping_describes: int | None = None  # None: a stopped job stays Stopping until set_status
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
            name = json.loads(response.body)["TrainingJobName"]
            if shim.stopping.get(name) is not None:  # Stopping -> Stopped after a few looks
                shim.stopping[name] -= 1
                if shim.stopping[name] < 0:
                    del shim.stopping[name]
                    if shim.job(name).training_job_status == "Stopping":
                        shim.set_status(name, "Stopped")
            return describe(response)

        def stop_training_job(response):
            name = response._get_param("TrainingJobName")
            jobs = response.sagemaker_backend.training_jobs
            if name not in jobs:
                raise ValidationError(message=f"Requested resource not found: {name}")
            if jobs[name].training_job_status != "InProgress":
                raise ValidationError(message=f"The training job {name} is not in InProgress state")
            shim.set_status(name, "Stopping")
            shim.stopping[name] = shim.stopping_describes
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


class FakeCredentialServer:
    """The AWS endpoints that hand out credentials, answering fake ones, for the credential-leak tests.

    Container credentials (any other GET), the instance metadata service (/latest/...), STS
    AssumeRole and AssumeRoleWithWebIdentity (POST) and the SSO portal (/federation/credentials)
    all return `secret` as the secret key; every request is recorded so a test can tell whether
    any credential provider asked at all.
    """

    def __init__(self, secret: str, host: str = "127.0.0.1", port: int = 0):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.secret = secret
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _reply(self, body: str, content_type: str = "application/json") -> None:
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self):  # IMDSv2 session token
                server.requests.append(f"PUT {self.path}")
                self._reply("imds-session-token", "text/plain")

            def do_GET(self):
                server.requests.append(f"GET {self.path}")
                path = self.path.split("?")[0]
                keys = server.keys()
                if path.startswith("/federation/credentials"):
                    self._reply(json.dumps({"roleCredentials": {
                        "accessKeyId": keys["AccessKeyId"], "secretAccessKey": keys["SecretAccessKey"],
                        "sessionToken": keys["Token"], "expiration": 4102444800000}}))
                elif path.startswith("/latest/meta-data/iam/security-credentials"):
                    self._reply("leaky" if path.endswith("/") else json.dumps({"Code": "Success", **keys}),
                                "text/plain" if path.endswith("/") else "application/json")
                else:  # container credentials, at any path
                    self._reply(json.dumps(keys))

            def do_POST(self):  # STS, query protocol
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                action = dict(pair.split("=", 1) for pair in body.split("&") if "=" in pair).get("Action", "")
                server.requests.append(f"POST {action}")
                keys = server.keys()
                self._reply(
                    f'<{action}Response xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><{action}Result>'
                    f"<Credentials><AccessKeyId>{keys['AccessKeyId']}</AccessKeyId>"
                    f"<SecretAccessKey>{keys['SecretAccessKey']}</SecretAccessKey>"
                    f"<SessionToken>{keys['Token']}</SessionToken><Expiration>{keys['Expiration']}</Expiration></Credentials>"
                    "<AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/leaky/s</Arn>"
                    "<AssumedRoleId>AROALEAKY:s</AssumedRoleId></AssumedRoleUser>"
                    f"</{action}Result><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></{action}Response>",
                    "text/xml",
                )

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.endpoint = f"http://{host}:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def keys(self) -> dict:
        return {"AccessKeyId": "ASIACANARYSERVED", "SecretAccessKey": self.secret, "Token": self.secret + "Token",
                "Expiration": "2100-01-01T00:00:00Z"}

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
