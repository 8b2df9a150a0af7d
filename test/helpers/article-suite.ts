// Articles end to end (CONTRACT §3, §5, §6): open reads, Accept-Language negotiation, per-language
// ETags, public vs private caching, the tag index and validation. Registered beside the order
// suite, so it runs in embedded mode and over NATS in cluster mode.

import type { TestFn } from 'ava';
import { type Caller, type Reply } from './client.js';
import { assertProblem, tenant, type SuiteContext, type T } from './order-suite.js';

const ARTICLE_SCOPES = 'articles:read articles:write';
const PUBLIC = 'public, max-age=60, s-maxage=300, stale-while-revalidate=30';

const BODY = {
  translations: { en: { title: 'Hello', body: 'English text' }, de: { title: 'Hallo', body: 'Deutscher Text' }, 'fr-CA': { title: 'Bonjour', body: 'Texte' } },
  defaultLanguage: 'en',
  tags: ['news', 'intro'],
};

function vary(res: Reply): string[] {
  return (res.headers.vary ?? '').split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
}

async function writer(t: T, label = 'art'): Promise<Caller> {
  return tenant(t, label, ARTICLE_SCOPES);
}

async function createArticle(t: T, c: Caller, body: Record<string, unknown> = BODY): Promise<string> {
  const res = await c.post('/v1/articles', body);
  t.is(res.status, 201, res.text);
  return res.json.id as string;
}

/** An anonymous GET of `path` in `tenantName`, with extra headers. */
function anon(t: T, path: string, tenantName: string, headers: Record<string, string> = {}): Promise<Reply> {
  const sep = path.includes('?') ? '&' : '?';
  return t.context.api.anonymous().get(`${path}${sep}tenant=${encodeURIComponent(tenantName)}`, headers);
}

export function registerArticleSuite(test: TestFn<SuiteContext>): void {
  test('articles: create answers 201 with Location, ETag and Content-Language; PATCH and DELETE follow', async (t) => {
    const c = await writer(t);
    const res = await c.post('/v1/articles', BODY);
    t.is(res.status, 201, res.text);
    const a = res.json;
    t.regex(a.id, /^art_/);
    t.is(res.headers.location, `/v1/articles/${a.id}`);
    t.regex(res.headers.etag ?? '', /^"[^"]+"$/);
    t.is(res.headers['content-language'], 'en');
    t.like(a, { title: 'Hello', body: 'English text', language: 'en', tags: ['news', 'intro'], _links: { self: { href: `/v1/articles/${a.id}` } } });
    t.deepEqual(a.availableLanguages, ['de', 'en', 'fr-CA']);
    t.deepEqual(a._links.tag, [
      { href: '/v1/articles?tag=news', name: 'news' },
      { href: '/v1/articles?tag=intro', name: 'intro' },
    ]);

    const patched = await c.patch(`/v1/articles/${a.id}`, { translations: { de: null, it: { title: 'Ciao', body: 'Testo' } }, tags: ['news'] }, { 'if-match': res.headers.etag! });
    t.is(patched.status, 200, patched.text);
    t.deepEqual(patched.json.availableLanguages, ['en', 'fr-CA', 'it']);
    t.deepEqual(patched.json.tags, ['news']);
    const stale = await c.patch(`/v1/articles/${a.id}`, { tags: [] }, { 'if-match': res.headers.etag! });
    assertProblem(t, stale, 412, 'precondition-failed');
    // JSON Merge Patch (RFC 7396): null removes the member; the article then has no tags.
    const untagged = await c.patch(`/v1/articles/${a.id}`, { tags: null });
    t.is(untagged.status, 200, untagged.text);
    t.deepEqual(untagged.json.tags, []);
    t.is(untagged.json._links.tag, undefined);

    const onlyTitle = await c.patch(`/v1/articles/${a.id}`, { translations: { EN: { title: 'Hi' } } });
    t.is(onlyTitle.status, 200, onlyTitle.text);
    t.like(onlyTitle.json, { title: 'Hi', body: 'English text' });

    t.is((await c.delete(`/v1/articles/${a.id}`)).status, 204);
    assertProblem(t, await c.delete(`/v1/articles/${a.id}`), 404, 'not-found');
    assertProblem(t, await c.get(`/v1/articles/${a.id}`), 404, 'not-found');
  });

  test('articles: Accept-Language picks the translation by q-value, range and fallback', async (t) => {
    const c = await writer(t);
    const id = await createArticle(t, c);
    const cases: [string | undefined, string][] = [
      [undefined, 'en'],
      ['de', 'de'],
      ['de-DE', 'de'], // lookup: de-DE falls back to de
      ['fr', 'fr-CA'], // filtering: fr matches fr-CA
      ['FR-ca', 'fr-CA'],
      ['it, de;q=0.5, en;q=0.4', 'de'],
      ['en;q=0.2, de;q=0.9', 'de'],
      ['ja', 'en'], // nothing fits: the default language
      ['*', 'en'],
      ['*, en;q=0', 'de'], // the wildcard, but not English: the first other language
      ['en;q=0, fr;q=0, ja', 'en'], // nothing fits at all: the default, even when refused
      ['de;q=0, *;q=0.5', 'en'],
      ['de;q=nonsense, fr;q=0.1', 'fr-CA'], // a malformed entry is skipped
    ];
    for (const [header, expected] of cases) {
      const res = await c.get(`/v1/articles/${id}`, header === undefined ? {} : { 'accept-language': header });
      t.is(res.status, 200, res.text);
      t.is(res.json.language, expected, `Accept-Language: ${header}`);
      t.is(res.headers['content-language'], expected, `Content-Language for ${header}`);
      t.true(vary(res).includes('accept-language'), `Vary: ${res.headers.vary}`);
    }
    const de = await c.get(`/v1/articles/${id}`, { 'accept-language': 'de' });
    t.like(de.json, { title: 'Hallo', body: 'Deutscher Text' });
  });

  test('articles: ETags differ per language, and If-None-Match answers 304 with the same headers', async (t) => {
    const c = await writer(t);
    const id = await createArticle(t, c);
    const en = await c.get(`/v1/articles/${id}`, { 'accept-language': 'en' });
    const de = await c.get(`/v1/articles/${id}`, { 'accept-language': 'de-AT' });
    t.not(en.headers.etag, de.headers.etag);
    const again = await c.get(`/v1/articles/${id}`, { 'accept-language': 'de' });
    t.is(again.headers.etag, de.headers.etag, 'one representation, one tag');

    const nm = await c.get(`/v1/articles/${id}`, { 'accept-language': 'de', 'if-none-match': de.headers.etag! });
    t.is(nm.status, 304);
    t.is(nm.text, '');
    t.is(nm.headers.etag, de.headers.etag);
    t.is(nm.headers['content-language'], 'de');
    t.is(nm.headers['cache-control'], 'private, no-cache');
    t.true(vary(nm).includes('accept-language'));

    const otherLanguage = await c.get(`/v1/articles/${id}`, { 'accept-language': 'en', 'if-none-match': de.headers.etag! });
    t.is(otherLanguage.status, 200, 'the German tag does not validate the English text');
    const fields = await c.get(`/v1/articles/${id}?fields=title`, { 'accept-language': 'de' });
    t.deepEqual(Object.keys(fields.json).sort(), ['_links', 'id', 'title']);
    t.not(fields.headers.etag, de.headers.etag);
  });

  test('articles: anonymous reads name the tenant and are publicly cacheable; authenticated reads are private', async (t) => {
    const c = await writer(t);
    const id = await createArticle(t, c);
    const authed = await c.get(`/v1/articles/${id}`);
    t.is(authed.headers['cache-control'], 'private, no-cache');
    t.true(vary(authed).includes('authorization'));

    const pub = await anon(t, `/v1/articles/${id}`, c.tenant, { 'accept-language': 'de' });
    t.is(pub.status, 200, pub.text);
    t.is(pub.headers['cache-control'], PUBLIC);
    t.is(pub.json.language, 'de');
    for (const h of ['accept', 'accept-encoding', 'accept-language', 'authorization']) t.true(vary(pub).includes(h), `Vary names ${h}: ${pub.headers.vary}`);
    const q = `tenant=${encodeURIComponent(c.tenant)}`;
    t.is(pub.json._links.self.href, `/v1/articles/${id}?${q}`, 'links keep the tenant, so an anonymous client can follow them');
    t.is(pub.json._links.tag[0].href, `/v1/articles?tag=news&${q}`);
    const followed = await t.context.api.anonymous().get(pub.json._links.self.href);
    t.is(followed.status, 200, followed.text);

    const nm = await anon(t, `/v1/articles/${id}`, c.tenant, { 'accept-language': 'de', 'if-none-match': pub.headers.etag! });
    t.is(nm.status, 304);
    t.is(nm.headers['cache-control'], PUBLIC);

    const list = await anon(t, '/v1/articles', c.tenant);
    t.is(list.status, 200, list.text);
    t.is(list.headers['cache-control'], PUBLIC);
    t.deepEqual(list.json.data.map((a: { id: string }) => a.id), [id]);

    assertProblem(t, await t.context.api.anonymous().get(`/v1/articles/${id}`), 400, 'invalid-parameter', { parameter: 'tenant' });
    assertProblem(t, await t.context.api.anonymous().get('/v1/articles'), 400, 'invalid-parameter', { parameter: 'tenant' });
    assertProblem(t, await c.get(`/v1/articles?tenant=someone-else`), 400, 'invalid-parameter', { parameter: 'tenant' });
    t.is((await c.get(`/v1/articles?${q}`)).status, 200, 'a token may name its own tenant');
  });

  test('articles: a bad token is 401 even on the open reads; a token without articles:read is 403', async (t) => {
    const c = await writer(t);
    const id = await createArticle(t, c);
    for (const path of [`/v1/articles/${id}?tenant=${c.tenant}`, `/v1/articles?tenant=${c.tenant}`]) {
      const bad = await t.context.api.http.send('GET', path, { token: 'not.a.token' });
      assertProblem(t, bad, 401, 'unauthenticated');
      t.regex(bad.headers['www-authenticate'] ?? '', /^Bearer/);
    }
    const noScope = await tenant(t, 'art', 'orders:read');
    assertProblem(t, await noScope.get('/v1/articles'), 403, 'forbidden');
    const readOnly = await tenant(t, 'art', 'articles:read');
    assertProblem(t, await readOnly.post('/v1/articles', BODY), 403, 'forbidden');
    assertProblem(t, await t.context.api.anonymous().post('/v1/articles', BODY), 401, 'unauthenticated');
    assertProblem(t, await t.context.api.anonymous().delete(`/v1/articles/${id}`), 401, 'unauthenticated');
  });

  test("articles: another tenant's article is 404, with a token or anonymously", async (t) => {
    const a = await writer(t);
    const b = await writer(t);
    const id = await createArticle(t, a);
    assertProblem(t, await b.get(`/v1/articles/${id}`), 404, 'not-found');
    assertProblem(t, await b.patch(`/v1/articles/${id}`, { tags: [] }), 404, 'not-found');
    assertProblem(t, await b.delete(`/v1/articles/${id}`), 404, 'not-found');
    assertProblem(t, await anon(t, `/v1/articles/${id}`, b.tenant), 404, 'not-found');
    assertProblem(t, await a.get('/v1/articles/art_nonsense'), 404, 'not-found');
    t.deepEqual((await b.get('/v1/articles')).json.data, []);
  });

  test('articles: ?tag= filters through the index, newest first, with keyset pages, limit and fields', async (t) => {
    const c = await writer(t);
    const tagged: string[] = [];
    for (let i = 0; i < 5; i++) {
      const id = await createArticle(t, c, { ...BODY, tags: i % 2 === 0 ? ['even', 'all'] : ['all'] });
      if (i % 2 === 0) tagged.push(id);
    }
    const seen: string[] = [];
    let href: string | undefined = '/v1/articles?tag=even&limit=2&fields=title';
    let pages = 0;
    while (href) {
      const res: Reply = await c.get(href, { 'accept-language': 'de' });
      t.is(res.status, 200, res.text);
      t.true(res.json.data.length <= 2);
      t.is(res.json.hasMore, res.json._links.next !== undefined);
      t.regex(res.headers.etag ?? '', /^"[^"]+"$/);
      t.is(res.headers['content-language'], 'de');
      for (const a of res.json.data) {
        t.deepEqual(Object.keys(a).sort(), ['_links', 'id', 'title']);
        t.is(a.title, 'Hallo');
      }
      seen.push(...res.json.data.map((a: { id: string }) => a.id));
      href = res.json._links.next?.href;
      if (++pages > 10) throw new Error('pagination does not end');
    }
    t.is(pages, 2);
    t.deepEqual(seen, [...tagged].reverse(), 'every tagged article once, newest first');
    t.is((await c.get('/v1/articles?tag=all&limit=100')).json.data.length, 5);
    t.deepEqual((await c.get('/v1/articles?tag=none')).json.data, []);

    const page = await c.get('/v1/articles?tag=even', { 'accept-language': 'de' });
    const nm = await c.get('/v1/articles?tag=even', { 'accept-language': 'de', 'if-none-match': page.headers.etag! });
    t.is(nm.status, 304);
    const en = await c.get('/v1/articles?tag=even', { 'accept-language': 'en' });
    t.not(en.headers.etag, page.headers.etag, 'a page in another language has another tag');

    const first = await c.get('/v1/articles?tag=even&limit=1');
    const cursor = new URL(first.json._links.next.href, 'http://x').searchParams.get('cursor');
    assertProblem(t, await c.get(`/v1/articles?tag=all&cursor=${cursor}`), 400, 'invalid-parameter', { parameter: 'cursor' });
    assertProblem(t, await c.get('/v1/articles?tag=Not%20A%20Tag'), 400, 'invalid-parameter', { parameter: 'tag' });
    assertProblem(t, await c.get('/v1/articles?limit=0'), 400, 'invalid-parameter', { parameter: 'limit' });
    assertProblem(t, await c.get('/v1/articles?fields=nope'), 400, 'invalid-parameter', { parameter: 'fields' });
    assertProblem(t, await c.get('/v1/articles?sort=title'), 400, 'invalid-parameter', { parameter: 'sort' });
  });

  test('articles: invalid bodies are 422 with pointers', async (t) => {
    const c = await writer(t);
    const cases: [Record<string, unknown>, string][] = [
      [{ ...BODY, defaultLanguage: 'it' }, '/defaultLanguage'],
      [{ ...BODY, defaultLanguage: 'not a tag' }, '/defaultLanguage'],
      [{ translations: {}, defaultLanguage: 'en' }, '/translations'],
      [{ translations: { 'english!': { title: 'x', body: 'y' } }, defaultLanguage: 'en' }, '/translations/english!'],
      [{ translations: { en: { title: 'x' } }, defaultLanguage: 'en' }, '/translations/en/body'],
      [{ translations: { en: { title: '', body: 'y' } }, defaultLanguage: 'en' }, '/translations/en/title'],
      [{ translations: { en: { title: 'x'.repeat(201), body: 'y' } }, defaultLanguage: 'en' }, '/translations/en/title'],
      [{ translations: { en: { title: 'x', body: 'y' }, EN: { title: 'x', body: 'y' } }, defaultLanguage: 'en' }, '/translations/EN'],
      [{ ...BODY, tags: ['Upper'] }, '/tags/0'],
      [{ ...BODY, tags: ['a', 'a'] }, '/tags'],
      [{ ...BODY, tags: Array.from({ length: 21 }, (_, i) => `t${i}`) }, '/tags'],
      [{ ...BODY, title: 'x' }, '/title'],
      [{ translations: Object.fromEntries(Array.from({ length: 3 }, (_, i) => [`l${'abc'[i]}`, { title: 't', body: 'é'.repeat(10_000) }])), defaultLanguage: 'la' }, '/translations'],
    ];
    for (const [body, pointer] of cases) {
      const res = await c.post('/v1/articles', body);
      assertProblem(t, res, 422, 'validation-failed', { pointer });
    }
    const id = await createArticle(t, c);
    assertProblem(t, await c.patch(`/v1/articles/${id}`, { translations: { en: null } }), 422, 'validation-failed', { pointer: '/defaultLanguage' });
    assertProblem(t, await c.patch(`/v1/articles/${id}`, { translations: { it: { title: 'Ciao' } } }), 422, 'validation-failed', { pointer: '/translations/it/body' });
    assertProblem(t, await c.patch(`/v1/articles/${id}`, { language: 'de' }), 422, 'validation-failed', { pointer: '/language', detail: /read-only/ });
    // Every failure of a patch at once: two incomplete new languages and a default that is none.
    const several = await c.patch(`/v1/articles/${id}`, { translations: { zz: { title: 'x' }, yy: { body: 'y' } }, defaultLanguage: 'qq' });
    assertProblem(t, several, 422, 'validation-failed');
    t.deepEqual((several.json.errors as { pointer: string }[]).map((e) => e.pointer).sort(), ['/defaultLanguage', '/translations/yy/title', '/translations/zz/body']);
    const incomplete = await c.patch(`/v1/articles/${id}`, { translations: { it: { title: 'Ciao' } }, defaultLanguage: 'it' });
    t.deepEqual((incomplete.json.errors as { pointer: string }[]).map((e) => e.pointer), ['/translations/it/body'], 'one failure, not a second about the default');
    // Merged, no more than 20 languages, however few each patch adds.
    const langs = (from: number, n: number): Record<string, { title: string; body: string }> =>
      Object.fromEntries(Array.from({ length: n }, (_, i) => [`x${String.fromCharCode(97 + Math.floor((from + i) / 26))}${String.fromCharCode(97 + ((from + i) % 26))}`, { title: 't', body: 'b' }]));
    const before = await c.get(`/v1/articles/${id}`);
    const total = Object.keys(BODY.translations).length;
    t.is((await c.patch(`/v1/articles/${id}`, { translations: langs(0, 20 - total) })).status, 200, 'up to 20');
    const over = await c.patch(`/v1/articles/${id}`, { translations: langs(20, 1) });
    assertProblem(t, over, 422, 'validation-failed', { pointer: '/translations', detail: /at most 20 languages/ });
    t.is((await c.get(`/v1/articles/${id}`)).json.availableLanguages.length, 20);
    t.not((await c.get(`/v1/articles/${id}`)).headers.etag, before.headers.etag);
    const ok = await c.patch(`/v1/articles/${id}`, { defaultLanguage: 'DE' });
    t.is(ok.status, 200, ok.text);
    t.is((await c.get(`/v1/articles/${id}`, { 'accept-language': 'ja' })).json.language, 'de', 'the new default serves unmatched requests');
  });

  test('articles: the root document links the collection and OpenAPI describes it', async (t) => {
    const root = await t.context.api.anonymous().get('/v1');
    t.is(root.json._links.articles.href, '/v1/articles');
    const doc = (await t.context.api.anonymous().get('/v1/openapi.json')).json;
    t.truthy(doc.paths['/v1/articles'].get);
    t.truthy(doc.paths['/v1/articles'].post);
    t.truthy(doc.paths['/v1/articles/{articleId}'].patch);
  });
}
