"""The code MLflow runs to load a served detector (a "model from code"; see ``leakpipe.serve``).

Never imported by leakpipe itself: MLflow executes this file when the model is loaded, and the
detector file comes from the model's artifacts in ``DetectorModel.load_context``.
"""

from mlflow.models import set_model

from leakpipe.serve.model import DetectorModel

set_model(DetectorModel())
