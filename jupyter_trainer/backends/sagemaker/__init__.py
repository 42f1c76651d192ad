"""Everything SageMaker: the backend, the SDK adapters (v2's Estimator, v3's resources), the
CloudWatch follower, the local-mode runner and the options of `%%sagemaker_fit`.

Only this package imports `sagemaker` or `boto3`, and only when a SageMaker job is used.
Importing the package imports nothing else: `declared.py` (the options of `%%sagemaker_fit`, the
run files) is read when the extension loads, and the backend (backend.py) made on first use.
"""
