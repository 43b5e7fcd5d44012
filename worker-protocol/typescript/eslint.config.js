// SPDX-License-Identifier: MIT
// The package's lint (test/run.sh build runs it): typescript-eslint's type-checked rules on
// src/, the recommended ones on the tests (plain ESM for Node).
import js from "@eslint/js";
import globals from "globals";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "node_modules/"] },
  {
    files: ["src/**/*.ts"],
    extends: [js.configs.recommended, ...tseslint.configs.recommendedTypeChecked],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      eqeqeq: "error",
    },
  },
  {
    files: ["test/**/*.mjs", "eslint.config.js"],
    extends: [js.configs.recommended],
    languageOptions: { globals: globals.node, sourceType: "module" },
    rules: { eqeqeq: "error" },
  },
);
