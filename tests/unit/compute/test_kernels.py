"""The kernels' thread discipline (smcdp.compute.kernels.one_blas_thread), in a fresh process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support.paths import REPO


def test_blas_is_pinned_to_one_thread_from_the_first_kernel_on_and_never_released():
    # A limit that came and went per pass changed results in the last bits (a bench cell run after
    # another differed from the Dask engine by 1e-13), so once a kernel ran, numpy's BLAS stays at
    # one thread, also outside kernels and after the pass.
    code = textwrap.dedent("""
        import numpy as np
        from threadpoolctl import threadpool_info, threadpool_limits
        from smcdp.compute import kernels
        threadpool_limits(2, user_api="blas")          # as on a 2-core host (OpenBLAS' default)
        def blas():
            return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})
        before = blas()
        A = np.arange(12.0).reshape(3, 4)
        with kernels.one_blas_thread:
            inside = blas()
            kernels.gram_block(A, np.ones((3, 1)))
        after = blas()
        with kernels.one_blas_thread:
            pass
        print(before, inside, after, blas())
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    ).stdout.split("]")
    before, inside, after, again = (s.strip(" [\n") for s in out[:4])
    assert before == "2", before  # the precondition holds: BLAS had two threads
    assert inside == after == again == "1", (inside, after, again)
