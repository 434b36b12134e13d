// hf_tokenizer_bench.js — the Hugging Face side of bench/tokenizer_vs_hf.sh: encodes the same corpus
// with the official Node binding of huggingface/tokenizers (npm `tokenizers`), one document at a
// time, timing only the encode calls, and writes the ids for tokenizer_bench --check-ids.
//
//   node hf_tokenizer_bench.js NODE_MODULES_DIR tokenizer.json corpus.jsonl REPEAT ids_out.bin
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [modules, tokenizerJson, corpus, repeatArg, idsOut] = process.argv.slice(2);
  const { Tokenizer } = require(path.resolve(modules, 'tokenizers'));
  const t0 = process.hrtime.bigint();
  const tokenizer = Tokenizer.fromFile(tokenizerJson);
  const loadS = Number(process.hrtime.bigint() - t0) / 1e9;
  const docs = fs.readFileSync(corpus, 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
  const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d, 'utf8'), 0);
  const repeat = Math.max(1, parseInt(repeatArg, 10));
  let best = Infinity;
  let first = 0;
  let encodings = new Array(docs.length);
  for (let r = 0; r < repeat; ++r) {
    let total = 0n;
    for (let i = 0; i < docs.length; ++i) {
      const start = process.hrtime.bigint();
      encodings[i] = await tokenizer.encode(docs[i], null, { addSpecialTokens: false });
      total += process.hrtime.bigint() - start;
    }
    const s = Number(total) / 1e9;
    if (r === 0) first = s;
    best = Math.min(best, s);
  }
  const chunks = [];
  let tokens = 0;
  for (const e of encodings) {
    const ids = e.getIds();
    tokens += ids.length;
    const buf = Buffer.alloc(4 * (ids.length + 1));
    buf.writeUInt32LE(ids.length, 0);
    for (let k = 0; k < ids.length; ++k) buf.writeUInt32LE(ids[k], 4 * (k + 1));
    chunks.push(buf);
  }
  fs.writeFileSync(idsOut, Buffer.concat(chunks));
  console.log(`hf: load ${loadS.toFixed(3)} s`);
  console.log(`hf: ${docs.length} documents, ${bytes} bytes, ${tokens} tokens`);
  console.log(`hf: first pass ${first.toFixed(3)} s, best of ${repeat} ${best.toFixed(3)} s`);
  console.log(`RESULT hf ${(bytes / best / 1e6).toFixed(2)} MB/s ${(tokens / best).toFixed(0)} tokens/s`);
}

main().catch((e) => {
  console.error(`error: ${e.stack || e}`);
  process.exit(1);
});
