import importlib.util

import pytest
from verl.rewards.sandbox import get_sandbox


@pytest.mark.skipif(importlib.util.find_spec("e2b_code_interpreter") is not None, reason="e2b installed")
def test_e2b_without_package_says_what_to_install():
    with pytest.raises(ImportError, match=r"pip install 'verl-rewards\[e2b\]'"):
        get_sandbox("e2b")
