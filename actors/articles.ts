// The article actor: public content in one or more languages, one of which is the default.
// Tags are indexed one key per tag, so `GET /articles?tag=x` is a range scan, not a filter.

import { Buffer } from 'node:buffer';
import { ApiError, type FieldError } from '../common/errors.js';
import type { ArticlePatch, ArticleRecord, CommandOf, ListQuery, Translation } from '../proto/messages.js';
import { emit } from './events.js';
import { type ActorDef, existing, existingMatching } from './actor.js';

export const ARTICLE_SORTS = ['createdAt'] as const;

/**
 * Most UTF-8 bytes of all titles and bodies together. A record must fit one bus reply
 * (MAX_REPLY_BYTES, 64 KiB) with room for its tags and the rest; the schema bounds each
 * translation, only the sum of them can be checked here, after a merge patch is applied.
 */
export const MAX_ARTICLE_TEXT_BYTES = 48 * 1024;
/** Most translations an article holds, after a merge patch too (the schema bounds each request). */
export const MAX_LANGUAGES = 20;

type ArticleCommand = CommandOf<'article.create' | 'article.get' | 'article.patch' | 'article.delete'>;

/** Index filter value of one tag; '*' (every article) cannot collide, tags hold no ':'. */
export const tagFilter = (tag: string): string => `tag:${tag}`;

/**
 * The rules the schema cannot state: the default language is one of the translations, there are
 * at most MAX_LANGUAGES, and the text fits a reply. Throws with every failure, `earlier` (a merge
 * patch's) first.
 */
function checkArticle(a: Pick<ArticleRecord, 'translations' | 'defaultLanguage'>, earlier: FieldError[] = []): void {
  const errors = [...earlier];
  const languages = Object.keys(a.translations).length;
  if (languages > MAX_LANGUAGES) {
    errors.push({ pointer: '/translations', detail: `may hold at most ${MAX_LANGUAGES} languages (it would hold ${languages})` });
  }
  // A default naming a language the patch adds incompletely is reported there, not twice.
  const failedThere = errors.some((e) => e.pointer?.startsWith(`/translations/${a.defaultLanguage}/`));
  if (!Object.prototype.hasOwnProperty.call(a.translations, a.defaultLanguage) && !failedThere) {
    errors.push({ pointer: '/defaultLanguage', detail: 'must be one of the languages in translations' });
  }
  let bytes = 0;
  for (const t of Object.values(a.translations)) bytes += Buffer.byteLength(t.title) + Buffer.byteLength(t.body);
  if (bytes > MAX_ARTICLE_TEXT_BYTES) {
    errors.push({ pointer: '/translations', detail: `titles and bodies together must fit in ${MAX_ARTICLE_TEXT_BYTES} bytes of UTF-8 (they take ${bytes})` });
  }
  if (errors.length) throw new ApiError('validation-failed', `The article has ${errors.length} invalid member${errors.length === 1 ? '' : 's'}.`, { errors });
}

/** The translations after a merge patch; a new language without a title or a body is pushed to `errors`. */
function mergeTranslations(base: Record<string, Translation>, patch: ArticlePatch['translations'], errors: FieldError[]): Record<string, Translation> {
  if (patch === undefined) return base;
  const out: Record<string, Translation> = { ...base };
  for (const [lang, t] of Object.entries(patch)) {
    if (t === null) {
      delete out[lang];
      continue;
    }
    const before = out[lang];
    const title = t.title ?? before?.title;
    const body = t.body ?? before?.body;
    if (title === undefined) errors.push({ pointer: `/translations/${lang}/title`, detail: 'is required for a new language' });
    if (body === undefined) errors.push({ pointer: `/translations/${lang}/body`, detail: 'is required for a new language' });
    if (title !== undefined && body !== undefined) out[lang] = { title, body };
  }
  return out;
}

export const articleActor: ActorDef<ArticleRecord, ArticleCommand> = {
  table: {
    name: 'articles',
    cached: true,
    indexKeys: (a) => [[a.tenant, '*', 'createdAt', a.createdAt, a.id], ...a.tags.map((tag) => [a.tenant, tagFilter(tag), 'createdAt', a.createdAt, a.id])],
  },

  isRead: (cmd) => cmd.kind === 'article.get',

  listPrefix: (q: ListQuery) => [q.tenant, q.filter === undefined ? '*' : tagFilter(q.filter), q.sort],

  decide(cmd, current, now) {
    switch (cmd.kind) {
      case 'article.get':
        return { next: current, reply: existing(current, 'article') };

      case 'article.create': {
        if (current) throw new ApiError('conflict', 'An article with that id already exists.');
        checkArticle(cmd.input);
        const article: ArticleRecord = { id: cmd.id, tenant: cmd.tenant, version: 1, ...cmd.input, createdAt: now, updatedAt: now };
        return { next: article, reply: article, events: [emit('article.created', 'article', article, now)] };
      }

      case 'article.patch': {
        const article = existingMatching(current, cmd, 'article');
        const { patch } = cmd;
        const errors: FieldError[] = [];
        const next: ArticleRecord = {
          ...article,
          translations: mergeTranslations(article.translations, patch.translations, errors),
          defaultLanguage: patch.defaultLanguage ?? article.defaultLanguage,
          tags: patch.tags === null ? [] : (patch.tags ?? article.tags),
          version: article.version + 1,
          updatedAt: now,
        };
        checkArticle(next, errors);
        return { next, reply: next, events: [emit('article.updated', 'article', next, now)] };
      }

      case 'article.delete': {
        existingMatching(current, cmd, 'article');
        return { next: undefined, reply: null };
      }
    }
  },
};
