import ValidatorSelector from '@fastify/ajv-compiler';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import type { FastifyServerOptions } from 'fastify';

type BuildSerializer = ReturnType<typeof SerializerSelector>;
type CompilersFactory = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>;
type BuildValidator = NonNullable<CompilersFactory['buildValidator']>;
type Validate = ((data: unknown) => unknown) & { errors?: unknown };
// fastify's type is a union of ajv's and JTD's signatures; what it calls is this.
type CompileValidator = (route: unknown) => Validate;
type BuildValidatorLoose = (externalSchemas: unknown, ajvOptions: unknown) => CompileValidator;

/**
 * fastify's default response serializer factory, remembering what it compiled: every
 * Public API route declares the same error responses (400, 401, 403, 404, 429, 500), and
 * compiling each of them again per route would be a large share of start-up
 * (BENCHMARKS.md, "Design decisions"). Identical schema, identical serializer.
 *
 * Each serializer is compiled on its first use, not at start: compiling all of them (and
 * fast-json-stringify's check of every schema against the JSON Schema meta-schema) costs
 * start time for routes most processes never answer. The schemas are
 * our own and covered by the tests, so a broken one fails its route's first request.
 */
export const buildSharedSerializer: BuildSerializer = (externalSchemas, serializerOpts) => {
  let compile: ReturnType<BuildSerializer> | undefined;
  const compiled = new Map<string, ReturnType<ReturnType<BuildSerializer>>>();
  return (route) => {
    const key = JSON.stringify(route.schema);
    let serializer = compiled.get(key);
    if (!serializer) {
      let serialize: ReturnType<ReturnType<BuildSerializer>> | undefined;
      serializer = (data) => {
        if (!serialize) {
          compile ??= SerializerSelector()(externalSchemas, serializerOpts);
          serialize = compile(route);
        }
        return serialize(data);
      };
      compiled.set(key, serializer);
    }
    return serializer;
  };
};

/**
 * fastify's default (ajv) validator factory, compiling each route's validator on its first
 * use and the ajv instance with the first of them: about 25 ms of a start otherwise (as
 * above). fastify reads a failed validation's `errors` from the function it was given, so
 * they are copied there.
 */
let validatorSelector: BuildValidatorLoose | undefined;

export const buildLazyValidator = ((externalSchemas: unknown, ajvOptions: unknown) => {
  let compile: CompileValidator | undefined;
  return (route: unknown) => {
    let validate: Validate | undefined;
    const lazy: Validate = (data) => {
      // One selector, as fastify's default: it shares ajv instances between plugin contexts.
      validatorSelector ??= ValidatorSelector() as unknown as BuildValidatorLoose;
      compile ??= validatorSelector(externalSchemas, ajvOptions);
      validate ??= compile(route);
      const result = validate(data);
      lazy.errors = validate.errors;
      return result;
    };
    lazy.errors = null;
    return lazy;
  };
}) as unknown as BuildValidator;
