'use strict';
// Split on case changes, spaces, dashes and underscores.
function words(s) {
  return String(s)
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .split(/[\s_-]+/)
    .filter(Boolean)
    .map((w) => w.toLowerCase());
}
const camel = (s) => words(s).map((w, i) => (i ? w[0].toUpperCase() + w.slice(1) : w)).join('');
const kebab = (s) => words(s).join('-');
const snake = (s) => words(s).join('_');
const title = (s) => words(s).map((w) => w[0].toUpperCase() + w.slice(1)).join(' ');
module.exports = { words, camel, kebab, snake, title };
