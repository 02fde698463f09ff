"""A speaker corpus that no one here recorded: espeak-ng voice variants as speakers (issue 37).

Every speaker is an espeak-ng English voice with a voice variant (``espeak-ng --voices=variant``), a base
pitch and a base speed; every utterance is a different random sentence, spoken at the speaker's speed
± 15 %, then speed-perturbed (resampled by a factor in [0.9, 1.1], as Kaldi's speed perturbation: tempo and
pitch together), given a random gain, leading/trailing silence and white noise at an SNR in [10, 30] dB,
and written as 16 kHz 16-bit mono WAV.  Deterministic given ``--seed`` (and the espeak-ng version).

Layout of ``--out`` (generated, never committed):

* ``enrolled/<speaker>/enroll/*.wav`` and ``enrolled/<speaker>/test/*.wav`` -- the ``--speakers``
  enrolled speakers (``--enroll`` utterances to enrol, the rest to test);
* ``background/<speaker>/*.wav`` -- ``--background`` other speakers for the UBM;
* ``corpus.json`` -- every speaker's voice, variant, pitch, speed, and every utterance's text and
  perturbation.

Example: ``python bench/speaker_corpus.py --out /tmp/spk --seed 1`` (about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from math import gcd
from pathlib import Path

import numpy as np
from scipy.io import wavfile
from scipy.signal import resample_poly

RATE = 16000
VOICES = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-us-nyc", "en-gb-x-gbclan",
          "en-gb-x-gbcwmd")
TEXT = ("the bank will call you tomorrow morning about your account and the new card we sent last week "
         "please remember to bring a passport or driving licence when you visit any branch near the station "
         "my voice is my password and nobody else can speak it like I do on a rainy afternoon in october "
         "seven green bottles stood on the kitchen window while the children counted apples and oranges "
         "quickly before the train left the platform at half past nine the weather was cold but bright "
         "every customer should verify recent payments transfers and standing orders before the end of the month")
WORDS = tuple(TEXT.split())


def variants(exe: str) -> list[str]:
    """The voice variants espeak-ng ships (``--voices=variant``), by their file name."""
    out = subprocess.run([exe, "--voices=variant"], capture_output=True, text=True, check=True).stdout
    names = []
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 5:
            names.append(parts[4].split("/")[-1])
    return sorted(set(names))


def synthesise(exe: str, text: str, voice: str, variant: str, speed: int, pitch: int, tmp: str) -> np.ndarray:
    path = os.path.join(tmp, "u.wav")
    cmd = [exe, "-v", f"{voice}+{variant}", "-s", str(speed), "-p", str(pitch), "-w", path, "--", text]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"espeak-ng failed ({' '.join(cmd)}): {res.stderr.strip()}")
    rate, x = wavfile.read(path)
    x = x.astype(np.float64) / 32768.0
    g = gcd(RATE, rate)
    return resample_poly(x, RATE // g, rate // g)


def perturb(x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    factor = float(rng.uniform(0.9, 1.1))                 # speed perturbation: resample by 1/factor
    num = round(1000 / factor)
    y = resample_poly(x, num, 1000)
    lead, trail = (int(rng.uniform(0.05, 0.3) * RATE) for _ in range(2))
    y = np.concatenate([np.zeros(lead), y, np.zeros(trail)])
    y = y * float(rng.uniform(0.3, 0.9)) / max(1e-9, float(np.max(np.abs(y))))
    snr = float(rng.uniform(10, 30))
    p_sig = float(np.mean(y[lead:len(y) - trail] ** 2)) or 1e-12
    y = y + rng.normal(scale=np.sqrt(p_sig / 10 ** (snr / 10)), size=y.shape)
    y = np.clip(y, -1, 1)
    return y, {"speed_factor": factor, "snr_db": snr}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speakers", type=int, default=12, help="enrolled speakers (default 12)")
    p.add_argument("--background", type=int, default=8, help="background (UBM) speakers (default 8)")
    p.add_argument("--utterances", type=int, default=20, help="utterances per speaker (default 20)")
    p.add_argument("--enroll", type=int, default=8, help="enrolment utterances per enrolled speaker (default 8)")
    p.add_argument("--espeak", default="espeak-ng")
    a = p.parse_args(argv)
    exe = shutil.which(a.espeak)
    if exe is None:
        print("error: espeak-ng not found; apt-get install espeak-ng", file=sys.stderr)
        return 2
    if a.speakers < 1 or a.utterances <= a.enroll:
        print("error: need speakers >= 1 and utterances > enroll", file=sys.stderr)
        return 2
    rng = np.random.default_rng(a.seed)
    var = variants(exe)
    n = a.speakers + a.background
    combos = [(v, w) for w in var for v in VOICES]
    picks = rng.choice(len(combos), size=n, replace=False)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"seed": a.seed, "espeak": subprocess.run([exe, "--version"], check=False, capture_output=True, text=True).stdout.strip(),
            "speakers": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i, k in enumerate(picks):
            voice, variant = combos[int(k)]
            enrolled = i < a.speakers
            name = f"spk{i:02d}" if enrolled else f"bg{i - a.speakers:02d}"
            pitch, speed = int(rng.integers(25, 75)), int(rng.integers(140, 190))
            spk = {"name": name, "voice": voice, "variant": variant, "pitch": pitch, "speed": speed,
                   "enrolled": enrolled, "utterances": []}
            for u in range(a.utterances):
                text = " ".join(rng.choice(WORDS, size=int(rng.integers(5, 9))))
                s = int(speed * rng.uniform(0.85, 1.15))
                x = synthesise(exe, text, voice, variant, s, pitch + int(rng.integers(-5, 6)), tmp)
                y, info = perturb(x, rng)
                if enrolled:
                    sub = out / "enrolled" / name / ("enroll" if u < a.enroll else "test")
                else:
                    sub = out / "background" / name
                sub.mkdir(parents=True, exist_ok=True)
                f = sub / f"u{u:02d}.wav"
                wavfile.write(f, RATE, (y * 32767).astype(np.int16))
                spk["utterances"].append({"file": str(f.relative_to(out)), "text": text, "wpm": s, **info,
                                          "seconds": len(y) / RATE})
            meta["speakers"].append(spk)
            print(f"{name}: {voice}+{variant} pitch {pitch} speed {speed}", file=sys.stderr)
    (out / "corpus.json").write_text(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
