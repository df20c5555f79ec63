// The tokenizer.json that `transformer export` writes, read by Hugging Face's Rust tokenizers (the
// npm package `tokenizers`), against `transformer tokenize`. Not part of the build or the tests (the
// project needs no Node); run it by hand:
//   npm install tokenizers                      # in any directory; then, with NODE_PATH pointing there:
//   node docs/hf_tokenizer_check.js DIR/tokenizer.json TEXTFILE > hf.txt
//   ./transformer tokenize --checkpoint DIR/model.safetensors --file TEXTFILE > ours.txt
//   cmp hf.txt ours.txt
// It prints the ids of TEXTFILE's whole text, comma-separated, without special tokens added (as
// `transformer tokenize` prints them).
const { Tokenizer } = require('tokenizers');
const fs = require('fs');

async function main() {
  if (process.argv.length !== 4) {
    console.error('usage: node hf_tokenizer_check.js DIR/tokenizer.json TEXTFILE');
    process.exit(2);
  }
  const tokenizer = Tokenizer.fromFile(process.argv[2]);
  const text = fs.readFileSync(process.argv[3], 'utf8');
  const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
  console.log(encoding.getIds().join(','));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
