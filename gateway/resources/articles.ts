// Articles: public content in several languages (CONTRACT §3, §5, §6). Reads are open: with a
// token the tenant is the caller's (and the token needs articles:read); without one the
// `tenant` query parameter names whose articles to read, and the answer may be kept by shared
// caches. Accept-Language picks the translation (gateway/language.ts); the served language
// feeds the ETag, Content-Language names it, and Vary says so.

import { ApiError, type FieldError } from '../../common/errors.js';
import { newId, partitionOf } from '../../common/ids.js';
import type { ArticlePatch, ArticleRecord, Translation } from '../../proto/messages.js';
import { ARTICLE_SORTS, MAX_LANGUAGES } from '../../actors/articles.js';
import { insufficientScope, isName } from '../auth.js';
import {
  LIST_PARAMS,
  decodeCursor,
  encodeCursor,
  fieldsParam,
  invalidParameter,
  gatherPage,
  pageFingerprint,
  pageLinks,
  pageText,
  parseAll,
  parseFields,
  parseLimit,
  parseSort,
  project,
  sortParam,
  variantOf,
} from '../collection.js';
import { LANGUAGE_TAG, LANGUAGE_TAG_MAX, acceptedLanguages, canonicalLanguage, negotiateLanguage, type AcceptedLanguages } from '../language.js';
import { cachedRendering } from '../representation.js';
import { type Ctx, type JsonSchema, type Outcome, type QueryParam, type RouteDef, partitionForNew, guards, principalOf, route } from '../route.js';
import { UNICODE_TEXT, collectionSchema, idParam, iso, linksSchema, problemResponses } from './common.js';

const BASE = '/v1/articles';
const ARTICLE_FIELDS = ['id', 'title', 'body', 'language', 'availableLanguages', 'tags', 'createdAt', 'updatedAt'] as const;
const READ_ONLY = ['id', 'title', 'body', 'language', 'availableLanguages', 'createdAt', 'updatedAt', '_links'];

/** CONTRACT §5: what an anonymous read of public content may be cached for. */
export const PUBLIC_ARTICLE_CACHE = 'public, max-age=60, s-maxage=300, stale-while-revalidate=30';

export const MAX_TAGS = 20;
export const MAX_BODY_CHARS = 48 * 1024;
/** Tags are slugs: they appear in URLs (`?tag=`) and index keys, so one spelling per tag. */
const TAG = '^[a-z0-9][a-z0-9_-]{0,39}$';

const languageSchema: JsonSchema = { type: 'string', maxLength: LANGUAGE_TAG_MAX, pattern: LANGUAGE_TAG, description: 'BCP 47 language tag.' };
const title: JsonSchema = { type: 'string', minLength: 1, maxLength: 200, pattern: '^[^\\u0000-\\u001f\\u007f\\uD800-\\uDFFF]+$' };
const body: JsonSchema = { type: 'string', maxLength: MAX_BODY_CHARS, pattern: UNICODE_TEXT };
const tagsSchema: JsonSchema = { type: 'array', maxItems: MAX_TAGS, uniqueItems: true, items: { type: 'string', pattern: TAG } };

const createSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['translations', 'defaultLanguage'],
  properties: {
    translations: {
      type: 'object',
      minProperties: 1,
      maxProperties: MAX_LANGUAGES,
      propertyNames: { maxLength: LANGUAGE_TAG_MAX, pattern: LANGUAGE_TAG },
      additionalProperties: { type: 'object', additionalProperties: false, required: ['title', 'body'], properties: { title, body } },
      description: `Up to ${MAX_LANGUAGES} translations by BCP 47 language tag.`,
    },
    defaultLanguage: languageSchema,
    tags: tagsSchema,
  },
};

const patchSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    translations: {
      type: 'object',
      maxProperties: MAX_LANGUAGES,
      propertyNames: { maxLength: LANGUAGE_TAG_MAX, pattern: LANGUAGE_TAG },
      additionalProperties: { type: ['object', 'null'], additionalProperties: false, minProperties: 1, properties: { title, body } },
      description: 'Merge patch: null removes a language; a new language needs title and body.',
    },
    defaultLanguage: languageSchema,
    tags: { ...tagsSchema, type: ['array', 'null'], description: 'Merge patch: the new tags; null removes them all.' },
  },
};

const articleSchema: JsonSchema = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    title: { type: 'string' },
    body: { type: 'string' },
    language: { type: 'string', description: 'The language served (also in Content-Language).' },
    availableLanguages: { type: 'array', items: { type: 'string' } },
    tags: { type: 'array', items: { type: 'string' } },
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
    _links: linksSchema,
  },
};

const tenantParam: QueryParam = {
  description: 'Whose public articles to read: required without a bearer token; with one it may only name the token\'s tenant.',
  schema: { type: 'string', minLength: 1, maxLength: 255, pattern: '^[^\\u0000-\\u001f\\u007f\\uD800-\\uDFFF]{1,255}$' },
};

/** Who reads: the token's tenant, or (anonymously) the one the `tenant` parameter names. */
interface Reader {
  tenant: string;
  anonymous: boolean;
}

function readerOf(ctx: Ctx): Reader {
  const named = ctx.query.get('tenant');
  const p = ctx.principal;
  if (p) {
    // The route is open, so the pipeline checked only that a sent token is valid; its scope is checked here.
    if (!p.scopes.has('articles:read')) throw insufficientScope('articles:read');
    if (named !== null && named !== p.tenant) throw invalidParameter('tenant', "must name the token's own tenant, or be left out");
    return { tenant: p.tenant, anonymous: false };
  }
  if (named === null) throw invalidParameter('tenant', 'is required without a bearer token: it names whose public articles to read');
  if (!isName(named)) throw invalidParameter('tenant', 'must be 1 to 255 characters without control characters');
  return { tenant: named, anonymous: true };
}

/** Anonymous readers' links carry the tenant, so following them reads the same articles. */
function linkQuery(reader: Reader): string {
  return reader.anonymous ? `tenant=${encodeURIComponent(reader.tenant)}` : '';
}

function href(path: string, ...params: string[]): string {
  const q = params.filter(Boolean).join('&');
  return q ? `${path}?${q}` : path;
}

export function renderArticle(a: ArticleRecord, language: string, lq: string): Record<string, unknown> {
  const t = a.translations[language] ?? a.translations[a.defaultLanguage]!;
  return {
    id: a.id,
    title: t.title,
    body: t.body,
    language,
    availableLanguages: Object.keys(a.translations).sort(),
    tags: a.tags,
    createdAt: iso(a.createdAt),
    updatedAt: iso(a.updatedAt),
    _links: {
      self: { href: href(`${BASE}/${a.id}`, lq) },
      ...(a.tags.length ? { tag: a.tags.map((tag) => ({ href: href(BASE, `tag=${tag}`, lq), name: tag })) } : {}),
    },
  };
}

/** The `tag` filter of a list: undefined for every article. */
function parseTag(query: URLSearchParams): string | undefined {
  const tag = query.get('tag') ?? undefined;
  if (tag !== undefined && !new RegExp(TAG).test(tag)) throw invalidParameter('tag', 'must be a tag: lower-case letters, digits, _ and -, at most 40');
  return tag;
}

function languageOf(accepted: AcceptedLanguages | undefined, a: ArticleRecord): string {
  return negotiateLanguage(accepted, Object.keys(a.translations), a.defaultLanguage);
}

/** The request's Accept-Language, read once however many articles it is matched against. */
function acceptedBy(ctx: Ctx): AcceptedLanguages | undefined {
  return acceptedLanguages(ctx.req.headers['accept-language']);
}

/** One article as this request gets it: in its negotiated language, tagged and cached per language. */
function outcome(ctx: Ctx, a: ArticleRecord, reader: Reader, fields: Set<string> | undefined, status = 200, location?: string): Outcome {
  const language = languageOf(acceptedBy(ctx), a);
  const lq = linkQuery(reader);
  return {
    status,
    render: () => project(renderArticle(a, language, lq), fields, new Set()),
    cacheKey: a.id,
    tag: { version: a.version, variant: variantOf(fields, new Set(), `l=${language};q=${lq}`) },
    headers: { 'content-language': language },
    // An anonymous answer is shared; a cache must not hand it to a request with a token (another tenant's view).
    vary: reader.anonymous ? ['Authorization', 'Accept-Language'] : ['Accept-Language'],
    ...(reader.anonymous && status === 200 ? { cache: PUBLIC_ARTICLE_CACHE } : {}),
    ...(location ? { location } : {}),
  };
}

function writer(ctx: Ctx): Reader {
  return { tenant: principalOf(ctx).tenant, anonymous: false };
}

function created(ctx: Ctx, a: ArticleRecord): Outcome {
  return outcome(ctx, a, writer(ctx), undefined, 201, `${BASE}/${a.id}`);
}

/**
 * Language tags are case-insensitive (RFC 5646 §2.1.1): keys are stored in canonical case, and
 * two members naming one language (`en` and `EN`) are refused rather than one silently winning.
 */
function canonicalTranslations<T>(raw: Record<string, T> | undefined): Record<string, T> | undefined {
  if (raw === undefined) return undefined;
  const out: Record<string, T> = {};
  const errors: FieldError[] = [];
  for (const [lang, t] of Object.entries(raw)) {
    const key = canonicalLanguage(lang);
    if (Object.prototype.hasOwnProperty.call(out, key)) errors.push({ pointer: `/translations/${lang}`, detail: `names the same language as another member (${key})` });
    out[key] = t;
  }
  if (errors.length) throw new ApiError('validation-failed', 'Two translations name the same language.', { errors });
  return out;
}

function articleIdOf(ctx: Ctx): string {
  return idParam(ctx, 'article', 'articleId', 'article');
}

function target(ctx: Ctx, tenant: string): { tenant: string; partition: number; id: string } {
  const id = articleIdOf(ctx);
  return { tenant, partition: partitionOf(id), id };
}

export const articleRoutes: RouteDef[] = [
  route({
    method: 'GET',
    path: BASE,
    operationId: 'listArticles',
    summary: 'List articles, newest first; optionally those with one tag. Open to anonymous callers naming a tenant.',
    tag: 'articles',
    scope: undefined,
    query: {
      tag: { description: 'Only articles with this tag.', schema: { type: 'string', pattern: TAG } },
      tenant: tenantParam,
      sort: sortParam(ARTICLE_SORTS, '-createdAt'),
      fields: fieldsParam(ARTICLE_FIELDS),
      ...LIST_PARAMS,
    },
    responses: { 200: 'A page of articles, each in its negotiated language.', 304: 'The tag in If-None-Match is current.', ...problemResponses(400) },
    response: collectionSchema(articleSchema),
    async handle(ctx) {
      const reader = readerOf(ctx);
      const [tag, { sort, dir }, limit, fields] = parseAll(
        () => parseTag(ctx.query),
        () => parseSort(ctx.query, ARTICLE_SORTS, '-createdAt'),
        () => parseLimit(ctx.query),
        () => parseFields(ctx.query, ARTICLE_FIELDS),
      );
      const sortKey = `${dir === 'desc' ? '-' : ''}${sort}`;
      const after = decodeCursor(ctx.query, 'articles', tag ?? '', sortKey, 'number');
      const { rows, hasMore } = await gatherPage<ArticleRecord>(ctx.bus, 'article.list', { tenant: reader.tenant, filter: tag, sort, dir, after, limit, withChildren: true });
      const last = rows[rows.length - 1];
      const links = pageLinks(BASE, ctx.query, hasMore && last ? encodeCursor('articles', tag ?? '', sortKey, last.v, last.record.id) : undefined);
      const lq = linkQuery(reader);
      const articles = rows.map((r) => r.record);
      const accepted = acceptedBy(ctx);
      const languages = articles.map((a) => languageOf(accepted, a));
      const members = articles.map((a, i) => {
        const language = languages[i]!;
        return cachedRendering(a.id, a.version, variantOf(fields, new Set(), `l=${language};q=${lq}`), () => project(renderArticle(a, language, lq), fields, new Set()));
      });
      const served = [...new Set(languages)].sort();
      return {
        status: 200,
        text: pageText(members, hasMore, links),
        tag: { fingerprint: pageFingerprint(articles, variantOf(fields, new Set(), `l=${languages.join(',')};q=${lq}`), hasMore, links) },
        // RFC 9110 §8.5: Content-Language may list every language of the page.
        ...(served.length ? { headers: { 'content-language': served.join(', ') } } : {}),
        vary: reader.anonymous ? ['Authorization', 'Accept-Language'] : ['Accept-Language'],
        ...(reader.anonymous ? { cache: PUBLIC_ARTICLE_CACHE } : {}),
      };
    },
  }),

  route({
    method: 'POST',
    path: BASE,
    operationId: 'createArticle',
    summary: 'Create an article in one or more languages.',
    tag: 'articles',
    scope: 'articles:write',
    body: { schema: createSchema, readOnly: READ_ONLY },
    responses: { 201: 'The new article in the negotiated language; Location names it.', ...problemResponses(415, 422) },
    response: articleSchema,
    async handle(ctx) {
      const input = ctx.body as { translations: Record<string, Translation>; defaultLanguage: string; tags?: string[] };
      const id = newId('article', partitionForNew(ctx));
      const a = await ctx.bus.call({
        kind: 'article.create',
        tenant: principalOf(ctx).tenant,
        partition: partitionOf(id),
        id,
        input: { translations: canonicalTranslations(input.translations)!, defaultLanguage: canonicalLanguage(input.defaultLanguage), tags: input.tags ?? [] },
      });
      return created(ctx, a);
    },
    replay: { partition: partitionForNew, outcome: (ctx, reply) => created(ctx, reply as ArticleRecord) },
  }),

  route({
    method: 'GET',
    path: `${BASE}/{articleId}`,
    operationId: 'getArticle',
    summary: 'Read an article in the language Accept-Language picks. Open to anonymous callers naming a tenant.',
    tag: 'articles',
    scope: undefined,
    query: { tenant: tenantParam, fields: fieldsParam(ARTICLE_FIELDS) },
    responses: { 200: 'The article; Content-Language names the language served.', 304: 'The tag in If-None-Match is current.', ...problemResponses(400, 404) },
    response: articleSchema,
    async handle(ctx) {
      const reader = readerOf(ctx);
      const fields = parseFields(ctx.query, ARTICLE_FIELDS);
      const a = await ctx.bus.call({ kind: 'article.get', ...target(ctx, reader.tenant) });
      return outcome(ctx, a, reader, fields);
    },
  }),

  route({
    method: 'PATCH',
    path: `${BASE}/{articleId}`,
    operationId: 'updateArticle',
    summary: 'Change translations, the default language or tags (JSON Merge Patch).',
    tag: 'articles',
    scope: 'articles:write',
    body: { schema: patchSchema, readOnly: READ_ONLY, mediaTypes: ['application/merge-patch+json', 'application/json'] },
    responses: { 200: 'The updated article.', ...problemResponses(404, 412, 415, 422) },
    response: articleSchema,
    async handle(ctx) {
      const raw = ctx.body as ArticlePatch;
      const patch: ArticlePatch = { ...raw };
      if (raw.translations !== undefined) patch.translations = canonicalTranslations(raw.translations);
      if (raw.defaultLanguage !== undefined) patch.defaultLanguage = canonicalLanguage(raw.defaultLanguage);
      const a = await ctx.bus.call({ kind: 'article.patch', ...target(ctx, principalOf(ctx).tenant), ...guards(ctx), patch });
      return outcome(ctx, a, writer(ctx), undefined);
    },
  }),

  route({
    method: 'DELETE',
    path: `${BASE}/{articleId}`,
    operationId: 'deleteArticle',
    summary: 'Delete an article.',
    tag: 'articles',
    scope: 'articles:write',
    responses: { 204: 'Deleted.', ...problemResponses(404, 412) },
    async handle(ctx) {
      await ctx.bus.call({ kind: 'article.delete', ...target(ctx, principalOf(ctx).tenant), ...guards(ctx) });
      return { status: 204, cache: 'no-store' };
    },
  }),
];
