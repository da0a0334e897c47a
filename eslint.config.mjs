// ESLint flat config: typescript-eslint (type-aware) + prettier.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import prettier from 'eslint-config-prettier';
import { importX, createNodeResolver } from 'eslint-plugin-import-x';
import { builtinModules } from 'node:module';

const nodeBuiltins = [...builtinModules, ...builtinModules.map((m) => `node:${m}`)];

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.venv-*/**', 'jobs/**', 'bin/**', 'scripts/**', 'eslint.config.mjs'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  prettier,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          // node:test's describe/it return promises the runner itself awaits.
          allowForKnownSafeCalls: [
            { from: 'package', package: 'node:test', name: ['describe', 'it', 'test', 'suite'] },
          ],
        },
      ],
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      'object-shorthand': 'error',
    },
  },
  {
    // The house rules: no import cycles, and modules of a few hundred lines. import-x/no-cycle skips type-only imports;
    // `npm run lint:cycles` (madge) counts them too: a contract that names an implementation's type still depends on it.
    files: ['src/**/*.ts', 'activities/**/*.ts', 'workflows/**/*.ts', 'workers/**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      'import-x/extensions': ['.ts'],
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
      'import-x/resolver-next': [createNodeResolver({ extensions: ['.ts', '.js'] })],
    },
    rules: {
      'import-x/no-cycle': ['error', { ignoreExternal: true }],
      'max-lines': ['error', { max: 400 }],
      // Functions read as named phases: a function longer than a screen is split into named steps.
      'max-lines-per-function': ['error', { max: 80, skipBlankLines: true, skipComments: true }],
    },
  },
  {
    // Contracts are the leaf ring: what a job, a task, a trial, a provider and an agent are. They import each other,
    // zod and Node's built-ins, nothing else of the project (type imports included), so every layer can use them.
    files: ['src/contracts/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(?!zod$|node:|\\./)',
              message: 'src/contracts imports only other contracts (./), zod and node: built-ins.',
            },
          ],
        },
      ],
    },
  },
  {
    // Workflow code is replayed deterministically inside Temporal's sandbox: no Node built-ins, no I/O. A concept's
    // own workflow and the pure code it runs sit in a `workflow/` folder of the concept's room (src/budget/workflow/).
    files: ['workflows/**/*.ts', 'src/**/workflow/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: nodeBuiltins.map((name) => ({
            name,
            message: 'Workflow code must be deterministic: no Node built-ins.',
          })),
          patterns: [
            {
              group: ['dockerode', '@kubernetes/*', '@temporalio/client', '@temporalio/worker', '@temporalio/activity'],
              message: 'Workflow code imports only @temporalio/workflow, type-only activity imports and pure code.',
            },
          ],
        },
      ],
    },
  }
);
