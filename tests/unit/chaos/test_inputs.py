"""chaos.inputs: a user's input file is read whole, and anything but a regular file is refused without blocking."""

import os

import pytest

from chaos.inputs import read_input


def test_a_regular_file_is_read_whole(tmp_path):
    """The bytes of a regular file, however long."""
    path = tmp_path / "s.toml"
    path.write_bytes(b"x" * (3 << 20))
    assert read_input(path) == b"x" * (3 << 20)


@pytest.mark.parametrize("make, why", [(os.mkfifo, "a FIFO"), (os.mkdir, "is a directory")])
def test_anything_else_is_an_oserror_saying_what_it_is(tmp_path, make, why):
    """A FIFO (whose open would block) or a directory: an OSError naming what the path is."""
    path = tmp_path / "p"
    make(path)
    with pytest.raises(OSError) as info:
        read_input(path)
    assert why in info.value.strerror
