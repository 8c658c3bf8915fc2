import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';

type BuildSerializer = ReturnType<typeof SerializerSelector>;

/**
 * fastify's default response serializer factory, remembering what it compiled: every
 * Public API route declares the same error responses (400, 401, 403, 404, 429, 500), and
 * compiling each of them again per route was a quarter of start-up (benchmarks, issue 8:
 * start ≤ 300 ms). Identical schema, identical serializer.
 */
export const buildSharedSerializer: BuildSerializer = (externalSchemas, serializerOpts) => {
  const compile = SerializerSelector()(externalSchemas, serializerOpts);
  const compiled = new Map<string, ReturnType<typeof compile>>();
  return (route) => {
    const key = JSON.stringify(route.schema);
    let serializer = compiled.get(key);
    if (!serializer) {
      serializer = compile(route);
      compiled.set(key, serializer);
    }
    return serializer;
  };
};
