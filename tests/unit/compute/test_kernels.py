"""The kernels' thread discipline (smcdp.compute.kernels.one_blas_thread), in a fresh process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

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


def test_a_finite_column_near_the_float_limit_is_clipped_not_refused():
    """A review: clipped_gram_block formed AᵀQ before the clipping's scale, so a finite column near 1e308 gave
    inf·0 = NaN and the block was refused (InputRejected) -- in a DP power round, whatever Trent's block: adding
    one column decided between a release and an abort.  Now the column is scaled first (its norm measured as
    m·‖a/m‖ when the sum of squares overflows) and contributes as the same column shortened to the clip would."""
    from smcdp.compute.kernels import clip_columns, clipped_gram_block

    rng = np.random.default_rng(3)
    k, clip = 4, 0.8
    ordinary = rng.normal(size=(k, 5)) * 0.3
    huge = np.array([[1.5e308, 1e200], [1.5e308, -1e200], [0.0, 3.0], [-1e308, 0.0]])
    A = np.hstack([ordinary, huge])
    Q, _ = np.linalg.qr(rng.normal(size=(k, 2)))
    Z, over = clipped_gram_block(A, Q, clip)
    assert np.all(np.isfinite(Z)) and over[0] == 2 + np.count_nonzero(np.linalg.norm(ordinary, axis=0) > clip)
    At, _ = clip_columns(A, clip)
    # the huge columns: their own direction at norm clip (computed from the column shrunk by an exact power of 2)
    for j in (5, 6):
        a = A[:, j] * 2.0**-1000
        np.testing.assert_allclose(At[:, j], a / np.linalg.norm(a) * clip, rtol=1e-15, atol=1e-300)
    np.testing.assert_array_equal(At[:, :5], clip_columns(ordinary, clip)[0])
    np.testing.assert_allclose(Z, At @ (At.T @ Q), rtol=1e-13, atol=1e-15)
