"""The trainer's modules import no Ray: only the Ray backend does, when it starts workers
(``trainer.worker_backend=local`` must run where Ray is not installed; the end-to-end run with the import
blocked is ``tests/test_local_backend_without_ray.py``)."""

import subprocess
import sys


def test_trainer_modules_leave_ray_unimported():
    code = (
        "import sys;"
        "import verl.trainer.main_ppo, verl.trainer.ppo.ray_trainer, verl.trainer.sft_trainer, verl.trainer.demo;"
        "from verl.trainer.ppo.ray_trainer import RayPPOTrainer, ResourcePoolManager, Role;"
        "from verl.single_controller.base.errors import WorkerError;"
        "print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_the_ray_package_still_exports_the_moved_names():
    from verl.single_controller.base.errors import WorkerDiedError, WorkerError
    from verl.single_controller.base.resource_pool_manager import ResourcePoolManager
    from verl.single_controller.ray import ResourcePoolManager as RayRPM
    from verl.single_controller.ray import WorkerDiedError as RayDied
    from verl.single_controller.ray import WorkerError as RayError

    assert (RayRPM, RayError, RayDied) == (ResourcePoolManager, WorkerError, WorkerDiedError)
