// Article records and inputs (CONTRACT §6, article row). Kept beside messages.ts, which imports
// them, so the message catalogue stays one list of kinds.

/** One language's text. Keys of `translations` are canonical BCP 47 tags (`de`, `de-CH`, `zh-Hant`). */
export interface Translation {
  title: string;
  body: string;
}

export interface ArticleRecord {
  id: string;
  tenant: string;
  version: number;
  translations: Record<string, Translation>;
  /** Always a key of `translations`: the one served when Accept-Language names none of them. */
  defaultLanguage: string;
  tags: string[];
  createdAt: number;
  updatedAt: number;
}

export interface ArticleInput {
  translations: Record<string, Translation>;
  defaultLanguage: string;
  tags: string[];
}

/** JSON Merge Patch (RFC 7396): a null translation removes that language; arrays replace. */
export interface ArticlePatch {
  translations?: Record<string, Partial<Translation> | null>;
  defaultLanguage?: string;
  /** null removes every tag (RFC 7396). */
  tags?: string[] | null;
}
