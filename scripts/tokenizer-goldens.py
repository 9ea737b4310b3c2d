#!/usr/bin/env python3
"""Writes the tokenizer agreement fixtures of tests/data/tokenizers/ with Hugging Face `tokenizers`.

Two small byte-level BPE vocabularies are trained on the same text with the two pre-tokenizer
configurations megacpp must reproduce:
  gpt2-style.json    ByteLevel(add_prefix_space=False, use_regex=True)          (GPT-2, StarCoder)
  llama3-style.json  Sequence[Split(Llama-3 regex, Isolated), ByteLevel(use_regex=False)],
                     model.ignore_merges = true                                  (Llama-3)
and expected.json holds Hugging Face's ids for each of the 12 documents of DOCUMENTS under each
(encode(doc, add_special_tokens=False)); adversarial.json the same for 300 random strings over
RANDOM_ALPHABET. tests/data/test_bpe_agreement.cpp checks megacpp's ids
against them. Tooling only (PyPI `tokenizers`), never a dependency of megacpp:

  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install tokenizers && /tmp/hf/bin/python scripts/tokenizer-goldens.py
"""
import json
import pathlib
import random

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizers"

# Llama-3's Split pattern (meta-llama/Meta-Llama-3-8B tokenizer.json, pre_tokenizer.pretokenizers[0]).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# The 12 documents: unicode, CRLF, numbers, contractions, code, and whitespace corner cases.
DOCUMENTS = [
    "Hello, world! The café serves crème brûlée; naïve résumé coöperate.",
    "日本語のテキストと中文字符, emoji 🙂🚀 and Ελληνικά, русский текст.",
    "line one\r\nline two\r\n\r\nline four\r\n",
    "Numbers: 1234567, 3.14159, 0x1F, 1e-9, 2024-11-25, 42nd and 100000000000.",
    "I don't think we'll know; they've said it's YOU'RE and I'M and WE'D, 'tis.",
    "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  return v.size() > 2 ? 0 : 1;\n}\n",
    "template <class T>\nstruct Box {\n\tT value;\t// tab-indented\n\tauto get() const -> T { return value; }\n};\n",
    "trailing spaces   \nand tabs\t\t\nmultiple    inner     spaces\n\n\n",
    "non\u00a0breaking\u00a0spaces, thin\u2009space, ideographic\u3000space and \u2028line separator",
    "   leading spaces and a final newline\n",
    "Mixed: α+β=γ, x² + y² = z², ½ ¼ ¾, Ⅻ, ①②③, ٣٤٥ and १२३.",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // dot product, O(n)\n",
]

TRAINING_TEXT = DOCUMENTS * 3 + [
    "int x = 0; int y = 1; return x + y;\n" * 20,
    "the quick brown fox jumps over the lazy dog. " * 20,
    "std::vector<std::string> names; for (auto& n : names) std::cout << n << '\\n';\n" * 10,
]


# Adversarial strings: every class the two regexes distinguish, and the characters where regex
# engines disagree on \s (U+0085, U+180E, U+200B, U+FEFF, U+1680, the C0 separators).
RANDOM_ALPHABET = list("abcXYZ019 '\t\n\r.,;:!?-_()[]{}<>=+*/\\\"#") + [
    "\u0085", "\u00a0", "\u2028", "\u2029", "\u3000", "\u2009", "\u200b", "é", "ß", "ǅ", "ʰ", "\u0301", "日", "本",
    "ー", "🙂", "١", "²", "½", "Ⅻ", "①", "\u00ad", "€", "\u1680", "\u180e", "\ufeff", "\x0b", "\x0c", "\x1c", "\x1f"]


def random_documents(n, seed=0):
    rng = random.Random(seed)
    return ["".join(rng.choice(RANDOM_ALPHABET) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def train(pre_tokenizer, ignore_merges):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    tok.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    config = json.loads(tok.to_str())
    config["model"]["ignore_merges"] = ignore_merges
    return Tokenizer.from_str(json.dumps(config)), config


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    styles = {
        "gpt2-style": (pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), False),
        "llama3-style": (pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]), True),
    }
    expected = {"documents": DOCUMENTS}
    adversarial = {"documents": random_documents(300)}
    for name, (pre, ignore_merges) in styles.items():
        tok, config = train(pre, ignore_merges)
        (OUT / f"{name}.json").write_text(json.dumps(config, ensure_ascii=False, separators=(",", ":")) + "\n",
                                          encoding="utf-8")
        expected[name] = [tok.encode(doc, add_special_tokens=False).ids for doc in DOCUMENTS]
        adversarial[name] = [tok.encode(doc, add_special_tokens=False).ids for doc in adversarial["documents"]]
        for doc, ids in zip(DOCUMENTS, expected[name]):
            assert tok.decode(ids, skip_special_tokens=False) == doc, (name, doc)
    (OUT / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    (OUT / "adversarial.json").write_text(json.dumps(adversarial, ensure_ascii=True, separators=(",", ":")) + "\n",
                                          encoding="utf-8")


if __name__ == "__main__":
    main()
