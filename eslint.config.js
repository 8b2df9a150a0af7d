// Type-aware lint: floating promises are bugs in a server (an unhandled rejection kills it).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'data/**', 'bench/results/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // The service's own code imports these: Node's globals of the same names are getters, run
    // on every use (about 0.7k instructions each time for Buffer, seen in a keyed POST's replay).
    files: ['gateway/**/*.ts', 'actors/**/*.ts', 'common/**/*.ts', 'storage/**/*.ts', 'proto/**/*.ts'],
    rules: {
      'no-restricted-globals': [
        'error',
        { name: 'Buffer', message: "Import it: import { Buffer } from 'node:buffer'." },
        { name: 'performance', message: "Import it: import { performance } from 'node:perf_hooks'." },
      ],
    },
  },
  { files: ['**/*.js'], languageOptions: { globals: { process: 'readonly', console: 'readonly' } } },
);
