#!/usr/bin/env python3
"""An independent reference for the Qwen2.5 tokenizer: GPT-2 style byte-level BPE.

Written from the algorithm's description (Radford et al. 2019, "Language Models are Unsupervised
Multitask Learners", section 2.2; BPE training as in Sennrich et al. 2016, "Neural Machine
Translation of Rare Words with Subword Units", section 3.2; the Qwen2 pre-tokenizer regex and the
NFC normalizer as the Qwen2.5 tokenizer.json states them), not from sonde's C++ or any other
implementation. Needs only Python 3 and Debian's python3-regex (for \\p{L}, \\p{N}, White_Space).

    qwen_tokenizer_ref.py train OUTDIR                  train the suite's own vocabulary
    qwen_tokenizer_ref.py retrain VOCABDIR              train again; exit 1 unless the files are the same
    qwen_tokenizer_ref.py generate VOCABDIR OUT.jsonl   write the cases of CASES with their ids
    qwen_tokenizer_ref.py check VOCABDIR CASES.jsonl    recompute every case; exit 1 on a difference

A VOCABDIR holds vocab.json and merges.txt in Qwen2.5's layout. The suite's own one,
tests/data/bpe-vocab, is trained by `train` on TRAIN_TEXT and the texts of CASES (so a fresh
clone tests the tokenizer without third-party files); ../shared/fixtures/qwen2.5-tokenizer holds
the real Qwen2.5 vocabulary. Both get the 22 added tokens of ADDED (ids 151643..151664, Qwen2.5's
ids; the same table is in tests/support/qwen_tokenizer.h).
Steps of encode: split out added tokens (leftmost, longest; they match the raw text) -> NFC each
remaining piece -> split it with the pre-tokenizer regex -> map each piece's UTF-8 bytes to the
byte alphabet -> merge adjacent symbols, lowest merge rank first -> look the symbols up in vocab.
Decode concatenates token bytes and decodes UTF-8 with U+FFFD for invalid parts.
"""
import json
import sys
import tempfile
import unicodedata
from pathlib import Path

try:
    import regex
except ImportError:  # ctest counts this as a skip for a missing package (tests/skip_report.py)
    print("qwen_tokenizer_ref.py: Skipped\nskipped: missing package python3-regex\n[  SKIPPED ] qwen_tokenizer_ref.py")
    sys.exit(77)


# (id, content, special): Qwen2.5's added tokens; all have lstrip/rstrip/normalized false.
ADDED = [
    (151643, "<|endoftext|>", True), (151644, "<|im_start|>", True), (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True), (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True), (151649, "<|box_end|>", True), (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True), (151652, "<|vision_start|>", True), (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True), (151655, "<|image_pad|>", True), (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False), (151658, "</tool_call>", False), (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False), (151661, "<|fim_suffix|>", False), (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False), (151664, "<|file_sep|>", False),
]

# Qwen2's pre-tokenizer; \s and \S are spelled as Unicode White_Space, as the Rust regex reads them.
WS, NWS = r"\p{White_Space}", r"\P{White_Space}"
PRETOKENIZE = regex.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    rf"| ?[^{WS}\p{{L}}\p{{N}}]+[\r\n]*|{WS}*[\r\n]+|{WS}+(?!{NWS})|{WS}+")


def byte_alphabet():
    """Byte -> printable character: bytes that print stand for themselves, the others take
    the characters from U+0100 on, in byte order."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    table, shifted = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


class Tokenizer:
    def __init__(self, vocab_dir):
        vocab_dir = Path(vocab_dir)
        self.vocab = json.loads((vocab_dir / "vocab.json").read_text(encoding="utf-8"))
        self.ranks = {}
        for line in (vocab_dir / "merges.txt").read_text(encoding="utf-8").split("\n"):
            if not line or line.startswith("#version"):
                continue
            left, right = line.split(" ")
            self.ranks[(left, right)] = len(self.ranks)
        self.added = {content: i for i, content, _ in ADDED}
        self.special = {i for i, _, s in ADDED if s}
        self.to_char = byte_alphabet()
        self.to_byte = {c: b for b, c in self.to_char.items()}
        self.id_to_token = {i: t for t, i in self.vocab.items()}

    def split_added(self, text):
        """[(piece, is_added)]: the leftmost added token, the longest if several start there."""
        out, start, i = [], 0, 0
        longest_first = sorted(self.added, key=len, reverse=True)
        while i < len(text):
            hit = next((a for a in longest_first if text.startswith(a, i)), None)
            if hit is None:
                i += 1
                continue
            if start < i:
                out.append((text[start:i], False))
            out.append((hit, True))
            i = start = i + len(hit)
        if start < len(text):
            out.append((text[start:], False))
        return out

    def bpe(self, word):
        symbols = list(word)
        while len(symbols) > 1:
            pairs = [(self.ranks.get(p, None), k) for k, p in enumerate(zip(symbols, symbols[1:]))]
            ranked = [(r, k) for r, k in pairs if r is not None]
            if not ranked:
                break
            best = min(ranked)[0]
            merged, k = [], 0
            while k < len(symbols):  # merge every non-overlapping occurrence, left to right
                if k + 1 < len(symbols) and self.ranks.get((symbols[k], symbols[k + 1])) == best:
                    merged.append(symbols[k] + symbols[k + 1])
                    k += 2
                else:
                    merged.append(symbols[k])
                    k += 1
            symbols = merged
        return [self.vocab[s] for s in symbols]

    def encode(self, text):
        ids = []
        for piece, is_added in self.split_added(text):
            if is_added:
                ids.append(self.added[piece])
                continue
            for word in PRETOKENIZE.findall(unicodedata.normalize("NFC", piece)):
                ids += self.bpe("".join(self.to_char[b] for b in word.encode("utf-8")))
        return ids

    def token_bytes(self, i):
        for content, j in self.added.items():
            if i == j:
                return content.encode("utf-8")
        tok = self.id_to_token.get(i)
        return b"" if tok is None else bytes(self.to_byte[c] for c in tok)

    def decode(self, ids):
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")


# Texts written for this project. An entry with bytes is invalid UTF-8: encode must refuse it
# and name the offset of the first bad byte.
CASES = [
    ("empty", ""),
    ("one_space", " "),
    ("ascii_sentence", "Activations are streamed to HDF5 while the model runs."),
    ("ascii_multiline", "First line.\nSecond line,\n\nafter a blank one."),
    ("leading_space", " leading"),
    ("trailing_spaces", "tail   "),
    ("space_then_newline", "x \n y"),
    ("whitespace_runs", "a  b   c    d\t\te\r\n\r\nf \t \n g"),
    ("only_newlines", "\n\n\n"),
    ("unicode_spaces", "a\u00a0b\u2003c\u3000d\u0085e\u200bf\ufeffg"),
    ("digits_split", "In 2024, 1234567 rows; pi=3.14159; -42 and +7e10."),
    ("other_numerics", "½ ² Ⅻ ٣٤ १२३ ①"),
    ("contractions", "it's we're they've I'm you'll she'd don't"),
    ("contractions_upper", "IT'S WE'RE THEY'VE I'M YOU'LL SHE'D DON'T"),
    ("contraction_alone", "'s 're 'x"),
    ("punctuation_runs", "Wait... what?!? (yes) [no] {maybe} <tag/> --> ==="),
    ("code_cpp", "int main() {\n  for (int i = 0; i < n; ++i) x[i] += y[i] * 2;\n  return 0;\n}\n"),
    ("code_python", "def f(x):\n    return {k: v for k, v in x.items() if v}\n"),
    ("url_email", "https://example.org/a/b?c=d&e=f#g user@example.com"),
    ("chinese", "数据科学家正在分析模型的激活值。"),
    ("japanese", "東京は日本の首都です。カタカナとひらがな。"),
    ("korean", "안녕하세요, 세계! 한국어 텍스트입니다."),
    ("arabic_hebrew", "مرحبا بالعالم שלום עולם"),
    ("cyrillic_greek", "Привет, мир! Γειά σου Κόσμε"),
    ("hindi_thai", "नमस्ते दुनिया สวัสดีชาวโลก"),
    ("emoji_single", "😊"),
    ("emoji_sequences", "👨\u200d👩\u200d👧 family 🇯🇵 flag 👍🏽 thumbs ❤️ heart"),
    ("emoji_between_words", "go🚀now🎉"),
    ("combining_nfc", "Cafe\u0301 nai\u0308ve A\u030a"),
    ("combining_partly_composed", "q\u0307 x\u0323\u0307"),
    ("hangul_jamo_nfc", "\u1100\u1161\u11a8"),
    ("precomposed", "Café naïve Å"),
    ("mixed_scripts", "GPU加速 with CUDA 12.4 и ROCm"),
    ("special_chat", "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"),
    ("special_glued", "a<|endoftext|>b<|endoftext|><|endoftext|>c"),
    ("special_nonspecial", "<tool_call>{\"name\": \"f\"}</tool_call>"),
    ("special_fim", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>"),
    ("special_partial", "<|im_start <|im_end| <tool_call <|mask|> <|beginoftext|>"),
    ("special_spaces", " <|im_end|> x"),
    ("long_word", "a" * 300),
    ("long_spaces", " " * 50 + "x"),
    ("repeated_pattern", "abracadabra" * 20),
    ("control_chars", "a\x00b\x01c\x7fd\x1be"),
    ("private_use_and_rare", "\ue000 \U0001f9ec \U00020000 \u2603"),
    ("apostrophe_unicode", "it\u2019s \u2018quoted\u2019 \u201cdouble\u201d"),
    ("invalid_lone_ff", b"ab\xffcd"),
    ("invalid_overlong", b"\xc0\xaf"),
    ("invalid_surrogate", b"x\xed\xa0\x80"),
    ("invalid_truncated", b"hi \xe4\xbd"),
    ("invalid_above_max", b"\xf4\x90\x80\x80"),
    ("invalid_continuation_first", b"\x80abc"),
]


def case_record(tok, name, text):
    if isinstance(text, bytes):
        try:
            text.decode("utf-8")
            raise SystemExit(f"case {name}: meant to be invalid UTF-8 but it decodes")
        except UnicodeDecodeError as e:
            return {"name": name, "hex": text.hex(), "error_offset": e.start}
    ids = tok.encode(text)
    decoded = tok.decode(ids)
    return {"name": name, "text": text, "ids": ids, "decoded": decoded, "round_trip": decoded == text}


def dumps(record):
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


# Text written for this project to train the suite's own vocabulary (with the texts of CASES):
# English prose, code and a few other scripts, so that merges cover words, indentation, digits
# and multi-byte characters while many characters stay split into byte tokens.
TRAIN_TEXT = """\
sonde runs language models from their checkpoints and streams what happens inside them to HDF5.
The model reads the tokens of the prompt, and every layer writes its activations to the file.
Researchers train sparse autoencoders on the activations, fit probes and find steering vectors.
A diffusion model makes the text by unmasking the tokens over the denoising steps; the masked
positions are predicted in parallel, and the most confident ones are committed at each step.
The tokenizer splits the text into words, the words into bytes, and merges the bytes again.
def forward(self, tokens, positions):
    hidden = self.embed(tokens)
    for layer in self.layers:
        hidden = layer(hidden, positions)
    return self.norm(hidden)

int main(int argc, char** argv) {
    for (int i = 0; i < argc; ++i) {
        std::cout << argv[i] << std::endl;
    }
    return 0;
}
In 2024 the model had 494032768 parameters, 24 layers and 14 heads; 0.5 B, 1.5 B, 3 B and 7 B.
数据科学家正在分析模型的激活值。模型的每一层都写入文件。
東京は日本の首都です。モデルはトークンを読みます。
안녕하세요, 세계! 모델은 토큰을 읽습니다.
Привет, мир! Модель читает токены.
"""


def train(out_dir, merges_wanted=1200):
    """BPE training: words (pre-tokenized, NFC, in the byte alphabet) with their counts; each
    round merges the most frequent adjacent pair (ties: the pair that sorts first), until
    `merges_wanted` merges or no pair occurs twice. vocab.json: the 256 byte symbols (ids 0..255
    in byte order), then each merge's result in merge order."""
    to_char = byte_alphabet()
    texts = [TRAIN_TEXT] + [t for _, t in CASES if isinstance(t, str)]
    words = {}
    for text in texts:
        for word in PRETOKENIZE.findall(unicodedata.normalize("NFC", text)):
            key = tuple(to_char[b] for b in word.encode("utf-8"))
            words[key] = words.get(key, 0) + 1
    merges = []
    while len(merges) < merges_wanted:
        pairs = {}
        for symbols, count in words.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] = pairs.get(pair, 0) + count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < 2:
            break
        merges.append(best)
        merged_words = {}
        for symbols, count in words.items():
            out, k = [], 0
            while k < len(symbols):
                if k + 1 < len(symbols) and (symbols[k], symbols[k + 1]) == best:
                    out.append(symbols[k] + symbols[k + 1])
                    k += 2
                else:
                    out.append(symbols[k])
                    k += 1
            merged_words[tuple(out)] = merged_words.get(tuple(out), 0) + count
        words = merged_words
    vocab = {to_char[b]: b for b in range(256)}
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    (out / "merges.txt").write_text("".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    print(f"trained {len(merges)} merges, {len(vocab)} tokens into {out}")
    return 0


def retrain(vocab_dir):
    with tempfile.TemporaryDirectory() as tmp:
        train(tmp)
        differ = [f for f in ("vocab.json", "merges.txt") if (Path(tmp) / f).read_bytes() != (Path(vocab_dir) / f).read_bytes()]
    for f in differ:
        print(f"MISMATCH {Path(vocab_dir) / f}: training gives other bytes (regenerate with `train`)")
    print(f"{vocab_dir}: " + ("differs from a new training" if differ else "the same as a new training"))
    return 1 if differ else 0


def generate(vocab_dir, out):
    tok = Tokenizer(vocab_dir)
    lines = [dumps(case_record(tok, name, text)) for name, text in CASES]
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} cases to {out}")
    return 0


def check(vocab_dir, path):
    """Recomputes ids, decoded text and error offsets; works on ../shared's cases.jsonl too."""
    tok, bad, n = Tokenizer(vocab_dir), 0, 0
    for line in Path(path).read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        case, n = json.loads(line), n + 1
        text = bytes.fromhex(case["hex"]) if "hex" in case else case["text"]
        want = case_record(tok, case.get("name", "?"), text)
        wrong = [k for k in ("ids", "decoded", "round_trip", "error_offset") if k in case and case[k] != want.get(k)]
        for key in wrong:
            print(f"MISMATCH {case.get('name')}: {key} is {case[key]!r}, the reference gives {want.get(key)!r}")
        bad += bool(wrong)
    print(f"{n - bad}/{n} cases agree with the reference ({path}, vocabulary {vocab_dir})")
    return 1 if bad else 0


if __name__ == "__main__":
    commands = {"train": (train, 1), "retrain": (retrain, 1), "generate": (generate, 2), "check": (check, 2)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) != 2 + commands[sys.argv[1]][1]:
        sys.exit(__doc__)
    sys.exit(commands[sys.argv[1]][0](*sys.argv[2:]))
