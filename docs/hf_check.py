#!/usr/bin/env python3
"""An export checked with the real Hugging Face classes (outside the project, which needs no Python).

Needs Python 3 with torch and transformers. For a checkpoint CK and its export DIR
(`transformer export --checkpoint CK --out DIR`):

  python3 docs/hf_check.py --checkpoint CK --export DIR --tokens 1,5,9,3,2,7 [--masked 2,5] \
      [--text-file probe.txt ...] [--transformer ./transformer]

1. The loss: `transformer grad` on CK (next-token for gpt and gpt2; the --masked positions, counted
   from 1, for bert and roberta, whose tokens become the mask id) against the class of
   config.json's "architectures", loaded with from_pretrained in float64: BertModel and
   RobertaModel give hidden states X^(L), de-embedded here with the tied word embeddings. They
   must agree to 1e-6 relative.
2. The tokenizer: each --text-file encoded by `transformer tokenize --checkpoint CK` and by
   AutoTokenizer from DIR, the fast class (tokenizer.json) and, where there is one, the slow class
   (vocab.json + merges.txt, vocab.txt), with add_special_tokens=False: the same ids.
Exit status 0 when everything agrees, 1 otherwise.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

# torch and transformers are imported in main(), so that read_text can be used (and tested)
# without them.
torch = transformers = None


def read_text(path):
    """A probe file's text exactly as `transformer tokenize --file` reads it: its bytes, decoded as
    UTF-8, with no newline translation (a CRLF stays CRLF; text mode would make it LF)."""
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out.stdout


def our_loss(tf, checkpoint, tokens, masked):
    with tempfile.TemporaryDirectory() as d:
        cmd = [tf, "grad", "--checkpoint", checkpoint, "--tokens", tokens, "--out", os.path.join(d, "g.safetensors")]
        if masked:
            cmd += ["--masked", masked]
        m = re.search(r"loss (\S+)", run(cmd))
        return float(m.group(1))


def hf_loss(export, ids, masked, mask_id):
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM
    config = AutoConfig.from_pretrained(export)
    arch = config.architectures[0]
    if arch.endswith("LMHeadModel") or arch.endswith("ForCausalLM"):
        model = AutoModelForCausalLM.from_pretrained(export, torch_dtype=torch.float64)
    elif arch.endswith("ForMaskedLM"):
        model = AutoModelForMaskedLM.from_pretrained(export, torch_dtype=torch.float64)
    else:
        model = AutoModel.from_pretrained(export, torch_dtype=torch.float64)
    model.eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        if not masked:  # next token: position i predicts token i + 1
            logits = model(x).logits[0]
            return torch.nn.functional.cross_entropy(logits[:-1], x[0, 1:]).item(), arch
        positions = [int(p) - 1 for p in masked.split(",")]
        targets = x[0, positions].clone()
        x[0, positions] = mask_id
        out = model(x)
        if hasattr(out, "logits"):
            logits = out.logits[0]
        else:  # BertModel / RobertaModel: X^(L) W_e^T
            logits = out.last_hidden_state[0] @ model.get_input_embeddings().weight.T
        return torch.nn.functional.cross_entropy(logits[positions], targets).item(), arch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--export", required=True)
    ap.add_argument("--tokens", required=True, help="ids, comma-separated")
    ap.add_argument("--masked", default="", help="bert, roberta: positions to predict, counted from 1")
    ap.add_argument("--mask-id", type=int, default=-1, help="default: the exported tokenizer's mask token")
    ap.add_argument("--text-file", action="append", default=[])
    ap.add_argument("--transformer", default="./transformer")
    a = ap.parse_args()
    global torch, transformers
    import torch
    import transformers
    from transformers import AutoTokenizer
    ok = True
    ids = [int(t) for t in a.tokens.split(",")]
    mask_id = a.mask_id
    if a.masked and mask_id < 0:
        mask_id = AutoTokenizer.from_pretrained(a.export).mask_token_id
    ours = our_loss(a.transformer, a.checkpoint, a.tokens, a.masked)
    theirs, arch = hf_loss(a.export, ids, a.masked, mask_id)
    rel = abs(theirs - ours) / abs(ours)
    good = rel <= 1e-6
    ok &= good
    print(f"{arch} (transformers {transformers.__version__}): loss {theirs:.9g}, transformer grad {ours:.9g}, "
          f"relative difference {rel:.2e} {'ok' if good else 'MORE THAN 1e-6'}")
    for path in a.text_file:
        text = read_text(path)
        want = [int(t) for t in run([a.transformer, "tokenize", "--checkpoint", a.checkpoint, "--file", path]).strip().split(",") if t]
        classes = [("fast", True)]
        tok_config = json.load(open(os.path.join(a.export, "tokenizer_config.json")))
        if tok_config.get("tokenizer_class") != "PreTrainedTokenizerFast":
            classes.append(("slow", False))
        for name, fast in classes:
            tok = AutoTokenizer.from_pretrained(a.export, use_fast=fast)
            got = tok(text, add_special_tokens=False)["input_ids"]
            same = got == want
            ok &= same
            print(f"{path}: {type(tok).__name__} ({name}) {'the same ' + str(len(got)) + ' ids' if same else 'DIFFERS'}")
            if not same:
                k = next((i for i, (u, v) in enumerate(zip(got, want)) if u != v), min(len(got), len(want)))
                print(f"  first difference at id {k}: {got[k:k + 8]} vs {want[k:k + 8]}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
