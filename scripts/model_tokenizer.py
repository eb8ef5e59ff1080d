"""A model directory's tokenizer as pipefill's tools use it (tokenize.py, detokenize.py): Hugging
Face `tokenizers` on the directory's tokenizer.json, its chat template, and the facts worth
recording beside the token ids.

Special tokens: exactly what tokenizer.json's post-processor adds (the BOS of Llama-3 files, none
for SmolLM2). That is what transformers 5 produces by default: with a tokenizer.json it drops
tokenizer_config.json's add_bos_token / add_eos_token and keeps the file's post-processor.
"""
import hashlib
import json
import os

import tokenizers

from python_tool import UserError, require_unicode

# The names transformers hands a chat template (its special_tokens_map), read from the config.
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def read_json(path, what):
    try:
        with open(path, "rb") as f:
            value = json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{path} is not valid JSON ({e}): {what}")
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}")
    if not isinstance(value, dict):
        raise UserError(f"{path} must hold a JSON object: {what}")
    return value


def token_content(value):
    # tokenizer_config.json writes a special token as "<s>" or as {"content": "<s>", ...}.
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class ModelTokenizer:
    def __init__(self, model_dir):
        if not os.path.exists(model_dir):
            if model_dir.startswith("synthetic:"):
                raise UserError(f"--model {model_dir}: a synthetic model has no tokenizer; give a model directory")
            raise UserError(f"--model {model_dir}: no such directory")
        if not os.path.isdir(model_dir):
            raise UserError(f"--model {model_dir} is not a directory (give the model's directory)")
        self.model_dir = os.path.abspath(model_dir)
        self.tokenizer_json = os.path.join(self.model_dir, "tokenizer.json")
        config_json = os.path.join(self.model_dir, "config.json")
        if not os.path.isfile(self.tokenizer_json):
            if not os.path.isfile(config_json):
                raise UserError(f"{model_dir} is not a model directory: it has neither tokenizer.json nor config.json")
            raise UserError(f"{model_dir} has no tokenizer.json (the Hugging Face tokenizers file that "
                            f"save_pretrained and scripts/get_model.sh write)")
        try:
            with open(self.tokenizer_json, "rb") as f:
                raw = f.read()
            self.tokenizer = tokenizers.Tokenizer.from_str(raw.decode("utf-8"))
        except OSError as e:
            raise UserError(f"cannot read {self.tokenizer_json}: {e.strerror}")
        except Exception as e:  # tokenizers raises a bare Exception on a bad file
            raise UserError(f"{self.tokenizer_json} is not a tokenizer tokenizers {tokenizers.__version__} can load: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}")
        self.tokenizer_sha256 = hashlib.sha256(raw).hexdigest()
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)

        config_path = os.path.join(self.model_dir, "tokenizer_config.json")
        self.config = read_json(config_path, "the tokenizer's settings") if os.path.isfile(config_path) else {}
        # What pipefill will check the ids against: ids below vocab_size, prompts no longer than
        # max_position_embeddings (unless --allow-long-prompts). None where config.json says nothing.
        model_config = read_json(config_json, "the model's configuration") if os.path.isfile(config_json) else {}
        self.model_vocab_size, self.max_positions = (
            value if isinstance(value, int) and value > 0 else None
            for value in (model_config.get("vocab_size"), model_config.get("max_position_embeddings")))

    def require_model_of(self, attributes, path):
        """A pipefill output's root attributes name the model that wrote it (model_config): a
        --model of another vocabulary would turn its ids into another model's words."""
        written = attributes.get("model_config")
        try:
            vocab = json.loads(written.decode() if isinstance(written, bytes) else written).get("vocab_size")
        except (TypeError, ValueError, AttributeError):
            return  # a prompt file, or an output without one: nothing to compare
        if isinstance(vocab, int) and self.model_vocab_size is not None and vocab != self.model_vocab_size:
            raise UserError(f"--model {self.model_dir} has a vocabulary of {self.model_vocab_size} tokens, but the "
                            f"model that wrote {path} has {vocab}: give that model's directory")

    def encode(self, texts, add_special_tokens):
        """Token ids of each text: one batch call, spread over the cores by the library."""
        # encode_batch_fast skips the character offsets, which nobody here reads (1.5-2x faster).
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        return [encoding.ids for encoding in encode(texts, add_special_tokens=add_special_tokens)]

    # ---- chat template ----------------------------------------------------------------------

    def chat_template(self):
        """The model's default chat template, found where transformers looks: chat_template.jinja
        first, then tokenizer_config.json's `chat_template` (a string, or named templates)."""
        path = os.path.join(self.model_dir, "chat_template.jinja")
        if os.path.isfile(path):
            try:
                with open(path, "rb") as f:
                    return f.read().decode("utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise UserError(f"cannot read {path}: {e}")
        template = self.config.get("chat_template")
        if isinstance(template, list):
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if not isinstance(template, str) or not template:
            raise UserError(f"{self.model_dir} has no chat template (chat_template.jinja or tokenizer_config.json's "
                            f"chat_template): leave out --chat for this model")
        # tokenizer_config.json's JSON may write a lone surrogate (chat_template.jinja is read as UTF-8).
        config_path = os.path.join(self.model_dir, "tokenizer_config.json")
        return require_unicode(template, f"the chat_template of {config_path}")

    def special_tokens(self):
        values = {}
        map_path = os.path.join(self.model_dir, "special_tokens_map.json")
        legacy = read_json(map_path, "the special tokens") if os.path.isfile(map_path) else {}
        for name in SPECIAL_TOKEN_NAMES:
            content = token_content(self.config.get(name)) or token_content(legacy.get(name))
            if content is not None:
                values[name] = content
        return values

    def chat_renderer(self):
        """A function text -> the prompt text of one user message followed by the assistant's
        header (add_generation_prompt), rendered by transformers' own Jinja sandbox and filters
        (the code apply_chat_template runs), so the prompt is the one transformers would build.
        Tokenize its result without special tokens: the template writes them itself."""
        template = self.chat_template()
        # Imported only for --chat: transformers costs ~0.6 s to import.
        from jinja2.exceptions import TemplateError
        from transformers.utils.chat_template_utils import render_jinja_template

        special = self.special_tokens()

        def render(text):
            try:
                rendered, _ = render_jinja_template(conversations=[[{"role": "user", "content": text}]],
                                                    chat_template=template, add_generation_prompt=True, **special)
            except TemplateError as e:
                raise UserError(f"the chat template of {self.model_dir} failed: {e}")
            return rendered[0]

        return render

    def prefix_id(self, why):
        """The token lm-evaluation-harness puts before a continuation that has no context: the BOS
        (tokenizer_config.json's bos_token), else the EOS."""
        special = self.special_tokens()
        for name in ("bos_token", "eos_token"):
            token_id = self.tokenizer.token_to_id(special[name]) if name in special else None
            if token_id is not None:
                return token_id
        raise UserError(f"{why}, and {self.model_dir} names no BOS or EOS token to stand for it")

    def prefix_text(self):
        """The prefix token's text (BOS, else EOS; "" without either): lm-evaluation-harness adds no
        special tokens to a text that already starts with it."""
        special = self.special_tokens()
        return special.get("bos_token") or special.get("eos_token") or ""

    # ---- ids back to text -------------------------------------------------------------------

    def has_id(self, token_id):
        return 0 <= token_id < 2**32 and self.tokenizer.id_to_token(int(token_id)) is not None

    def decode(self, ids, skip_special_tokens=False):
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
