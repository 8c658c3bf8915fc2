// Stands in for pg-native (node-postgres's optional libpq binding), which the bundle leaves
// out: the executable is pure JavaScript apart from SQLite's addon. Failing as a missing
// package does makes pg treat it exactly as on an install without pg-native (`pg.native` is null).
const err = new Error('pg-native is not part of telemetryd: the pure JavaScript driver is used');
err.code = 'MODULE_NOT_FOUND';
throw err;
