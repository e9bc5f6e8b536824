"""Known answers for the prefix cache's block hash (crates/engine/src/kv/block_hash.rs):
SHA-256 over the byte layout documented there, computed independently with hashlib."""
import hashlib
import struct

TAG = b"kestrel-kv-block-v2\0"


def opt(b):
    return b"\x00" if b is None else b"\x01" + b


def block_hash(parent, tokens, extra_key=None, salt=None):
    h = hashlib.sha256()
    h.update(TAG)
    h.update(opt(parent))
    h.update(opt(None if extra_key is None else struct.pack("<Q", extra_key)))
    if parent is None:
        if salt is None:
            h.update(b"\x00")
        else:
            s = salt.encode()
            h.update(b"\x01" + struct.pack("<Q", len(s)) + s)
    h.update(struct.pack("<Q", len(tokens)))
    h.update(b"".join(struct.pack("<I", t) for t in tokens))
    return h.digest()


a = block_hash(None, [1, 2, 3, 4])
print("GOLDEN_PLAIN", a.hex())
print("GOLDEN_SALTED", block_hash(None, [1, 2, 3, 4], 7, "tenant-a").hex())
print("GOLDEN_CHILD", block_hash(a, [5, 6, 7, 8]).hex())
