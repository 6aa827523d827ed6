/* The library fake_backend.c's FA_FAKE_NEEDS_MISSING variant needs, and that the test does not
 * copy beside it. */
__attribute__((visibility("default"))) int fa_fake_missing_dependency(void) { return 0; }
