"""The contents of a tensor declared `= file(path=...)`: a regular `.npy` file holding an
array of the tensor's shape. The program names the path, so it is checked as input: a
FIFO is not waited on, and a header is compared with the declaration before the data is
read (a header may claim any size)."""

from __future__ import annotations

import os
import stat

import numpy as np

from stepc.codes import UNREADABLE_FILE
from stepc.sim.kernel import SimError


def load_tensor_file(t, path: str, span) -> np.ndarray:
    """The array of tensor `t` from the `.npy` file `path`; SimError (E0002, at `span`) for
    a file that is missing, not a regular file, not a `.npy` array, or of another shape."""
    def refuse(why: str) -> SimError:
        return SimError(f"tensor `{t.name}`: {why}", span=span, code=UNREADABLE_FILE)

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise refuse(f"{path} is not a regular file (a device, a FIFO or a socket)")
        arr = np.load(path, mmap_mode="r", allow_pickle=False)  # the header only, yet
    except FileNotFoundError:
        raise refuse(f"no such file: {path} (a `file` path is relative to the program's "
                     "folder)") from None
    except (OSError, ValueError, EOFError) as e:
        raise refuse(f"cannot load {path}: {e or 'the file is empty'}") from None
    if not isinstance(arr, np.ndarray):  # an .npz archive
        arr.close()
        raise refuse(f"{path} is an .npz archive, not a .npy array")
    if tuple(arr.shape) != tuple(t.shape):
        raise SimError(f"tensor `{t.name}` is declared {list(t.shape)} but {path} holds "
                       f"{list(arr.shape)}", span=span, code=UNREADABLE_FILE)
    return np.array(arr)
