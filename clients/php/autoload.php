<?php

// Load the Gradus PHP library without Composer: require this file.
// (With Composer the "autoload" section of composer.json does the same.)
spl_autoload_register(static function (string $class): void {
    if (strncmp($class, 'Gradus\\', 7) === 0) {
        $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, 7)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
