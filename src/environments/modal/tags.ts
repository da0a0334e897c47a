/**
 * Rollout's labels as Modal tags. Modal documents its tag rule as "alphanumeric characters, dashes, periods, or
 * underscores, and must be 63 characters or less" (modal-labs/modal-client py/modal/_utils/name_utils.py, the tag
 * check; the JS SDK maps the tag RPCs' INVALID_ARGUMENT to InvalidError). Rollout's values hold `/` (a trial id is
 * `job/trial`), registry references and up to 255 characters, so each value is written in that alphabet, reversibly,
 * and one longer than 63 characters is cut into numbered tags: `<key>.<count>.<i>`. A filter on a value then names
 * every piece, and values of another piece count carry other tag names, so no filter matches a longer value.
 */

/** Modal's tag rule (see above): the longest tag value, and the characters a value may hold. */
const MAX_TAG_LENGTH = 63;
const PLAIN = /[A-Za-z0-9.-]/;
/** Escapes start with `_` (the one allowed character not kept as is): `__` is `_`, `_.` is `/`, else 4 hex digits. */
const ESCAPE = '_';

function encodeValue(value: string): string {
  let encoded = '';
  for (let i = 0; i < value.length; i++) {
    const char = value[i]!;
    if (PLAIN.test(char)) encoded += char;
    else if (char === ESCAPE) encoded += '__';
    else if (char === '/') encoded += '_.';
    else encoded += `_${value.charCodeAt(i).toString(16).padStart(4, '0')}`; // one UTF-16 code unit
  }
  return encoded;
}

function decodeValue(encoded: string): string {
  let out = '';
  for (let i = 0; i < encoded.length; i++) {
    const char = encoded[i]!;
    const next = encoded[i + 1];
    if (char !== ESCAPE) {
      out += char;
    } else if (next === ESCAPE || next === '.') {
      out += next === ESCAPE ? ESCAPE : '/';
      i += 1;
    } else {
      out += String.fromCharCode(parseInt(encoded.slice(i + 1, i + 5), 16));
      i += 4;
    }
  }
  return out;
}

/** Labels as tags Modal accepts (see above). */
export function modalTags(labels: Record<string, string>): Record<string, string> {
  const tags: Record<string, string> = {};
  for (const [key, value] of Object.entries(labels)) {
    const encoded = encodeValue(value);
    if (encoded.length > 0 && encoded.length <= MAX_TAG_LENGTH) {
      tags[key] = encoded;
      continue;
    }
    const pieces = encoded.match(new RegExp(`.{1,${MAX_TAG_LENGTH}}`, 'g')) ?? [''];
    pieces.forEach((piece, i) => (tags[`${key}.${pieces.length}.${i}`] = piece));
  }
  return tags;
}

/** Labels from a sandbox's tags, as modalTags wrote them (tags it did not write are kept as they are). */
export function labelsOfModalTags(tags: Record<string, string>): Record<string, string> {
  const labels: Record<string, string> = {};
  const pieces = new Map<string, string[]>();
  for (const [name, value] of Object.entries(tags)) {
    const piece = /^(.+)\.(\d+)\.(\d+)$/.exec(name);
    if (!piece) {
      labels[name] = decodeValue(value);
      continue;
    }
    const [, key, count, index] = piece;
    const list = pieces.get(`${key}.${count}`) ?? new Array<string>(Number(count)).fill('');
    list[Number(index)] = value;
    pieces.set(`${key}.${count}`, list);
  }
  for (const [keyCount, list] of pieces) labels[keyCount.replace(/\.\d+$/, '')] = decodeValue(list.join(''));
  return labels;
}
