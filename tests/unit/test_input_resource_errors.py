"""A party's machine running out while it reads its inputs is not a bad input (issue 41, item 6).

Power iteration's matrix sources passed EMFILE, ENOMEM and EIO on (tests/unit/compute/test_sources.py); every
other reader of a party's input files turned them into InputRejected or InvalidMessage ("the data file is not a
valid .npz", "the utterance file is not a valid .npy array", "cannot read model file"), which ends a session for
good although nothing is wrong with the data.  Each reader now passes such an error on as it is, so that the
session fails UNAVAILABLE naming the party and the cause (smcdp.errors.resource_failure), resumably; a file that
is not what it should be is still the data's fault."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from smcdp.errors import InvalidMessage, NoSpace, resource_failure
from smcdp.plugins import dp_aggregate as dpa_plugin
from smcdp.plugins import keyword as kw_plugin
from smcdp.speech import audio, features, models, speaker


def _npz(path):
    np.savez(path, X=np.full((3, 2), 0.1), y=np.array([1, -1, 1]))
    return path


def _npy(path):
    np.save(path, np.zeros((4, 39)))
    return path


def _wav(path):
    from scipy.io import wavfile

    wavfile.write(path, 16000, np.zeros(1600, dtype=np.int16))
    return path


# (what reads, the file it is given, the module whose call fails, the name of that call)
READERS = {
    "dp-aggregate data": (dpa_plugin.load_dataset, _npz, "data.npz", np, "load"),
    "keyword utterance kind": (kw_plugin.utterance_kind, _npy, "u.npy", kw_plugin, "open"),
    "keyword utterance": (kw_plugin.load_utterance, _npy, "u.npy", np, "load"),
    "WAV audio (header)": (audio.read_wav, _wav, "a.wav", audio, "open"),
    "feature file": (lambda p: features.load_features(p), _npy, "f.npy", np, "load"),
    "keyword models": (models.KeywordModels.load, _npz, "m.npz", np, "load"),
    "speaker UBM": (speaker.UBM.load, _npz, "ubm.npz", np, "load"),
    "enrolled speakers": (speaker.SpeakerModels.load, _npz, "spk.npz", np, "load"),
}


@pytest.mark.parametrize("errno_", [errno.EMFILE, errno.ENOMEM, errno.EIO])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_machine_running_out_while_reading_an_input_is_passed_on_not_rejected(tmp_path, monkeypatch, reader, errno_):
    read, make, name, module, call = READERS[reader]
    path = make(tmp_path / name)

    def broken(*a, **kw):
        raise OSError(errno_, os.strerror(errno_))

    monkeypatch.setattr(module, call, broken, raising=module is np)
    with pytest.raises(OSError) as info:
        read(path)
    assert not isinstance(info.value, InvalidMessage)  # InputRejected is an InvalidMessage
    failure = resource_failure(info.value, "alice", "session s")
    assert isinstance(failure, NoSpace) and failure.code == "UNAVAILABLE" and failure.origin == "alice"


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_file_that_is_not_what_it_should_be_is_still_the_datas_fault(tmp_path, reader):
    read, _, name, _, _ = READERS[reader]
    (tmp_path / name).write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk" if name.endswith(".wav") else b"not an array")
    with pytest.raises(InvalidMessage):
        read(tmp_path / name)
