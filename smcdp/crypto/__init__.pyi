# Type stub of smcdp/crypto/__init__.py: what type checkers see of the names it exports lazily (PEP 562).
# A stub rather than `if TYPE_CHECKING:` imports, which would make the package and its modules import each other.
from smcdp.crypto.encoding import DEFAULT_FRAC_BITS as DEFAULT_FRAC_BITS
from smcdp.crypto.encoding import UNPACKED as UNPACKED
from smcdp.crypto.encoding import Packing as Packing
from smcdp.crypto.encoding import decode_fixed as decode_fixed
from smcdp.crypto.encoding import encode_fixed as encode_fixed
from smcdp.crypto.obfuscation import ObfuscatorPool as ObfuscatorPool
from smcdp.crypto.paillier import PrivateKey as PrivateKey
from smcdp.crypto.paillier import PublicKey as PublicKey
from smcdp.crypto.paillier import generate_keypair as generate_keypair
from smcdp.crypto.paillier import load_private_key as load_private_key
from smcdp.crypto.paillier import load_public_key as load_public_key
from smcdp.crypto.paillier import save_private_key as save_private_key
from smcdp.crypto.paillier import save_public_key as save_public_key
from smcdp.crypto.threads import CryptoThreads as CryptoThreads
from smcdp.crypto.vector import EncryptedVector as EncryptedVector

__all__ = [
    "DEFAULT_FRAC_BITS",
    "UNPACKED",
    "CryptoThreads",
    "EncryptedVector",
    "ObfuscatorPool",
    "Packing",
    "PrivateKey",
    "PublicKey",
    "decode_fixed",
    "encode_fixed",
    "generate_keypair",
    "load_private_key",
    "load_public_key",
    "save_private_key",
    "save_public_key",
]
