"""Plaintext speech pipeline for privacy-preserving keyword recognition.

* :mod:`smcdp.speech.features` — 39-d MFCC front end (python_speech_features).
* :mod:`smcdp.speech.models` — keyword HMM container, ``.npz`` format, hmmlearn training.
* :mod:`smcdp.speech.forward` — log-domain forward algorithm (the reference for the
  secure protocol) and the quadratic-form parameterisation of Gaussian emissions.

The heavy optional dependencies (python_speech_features, hmmlearn, scikit-learn)
are imported lazily inside the functions that need them.
"""

from .features import (
    N_FEATURES,
    SAMPLE_RATE,
    load_features,
    load_wav,
    mfcc39,
    vector_quantise,
    wav_features,
)
from .forward import (
    log_emissions,
    log_likelihood,
    product_index_pairs,
    products,
    quadratic_coefficients,
    quadratic_form,
    quadratic_forms,
    recognise,
    score_models,
)
from .models import (
    HMM,
    KeywordModels,
    load_models,
    train_keyword_models,
    train_word_hmm,
)

__all__ = [
    "HMM",
    "N_FEATURES",
    "SAMPLE_RATE",
    "KeywordModels",
    "load_features",
    "load_models",
    "load_wav",
    "log_emissions",
    "log_likelihood",
    "mfcc39",
    "product_index_pairs",
    "products",
    "quadratic_coefficients",
    "quadratic_form",
    "quadratic_forms",
    "recognise",
    "score_models",
    "train_keyword_models",
    "train_word_hmm",
    "vector_quantise",
    "wav_features",
]
