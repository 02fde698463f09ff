import functools

import pytest

from smcdp.crypto.paillier import generate_keypair


@functools.lru_cache(maxsize=None)
def _keypair(bits: int):
    # Small keys are an explicit, test-only opt-in.
    return generate_keypair(bits, allow_insecure=bits < 2048)


@pytest.fixture(scope="session")
def keypair512():
    return _keypair(512)


@pytest.fixture(scope="session")
def keypair1024():
    return _keypair(1024)


@pytest.fixture(scope="session")
def keypair2048():
    return _keypair(2048)
