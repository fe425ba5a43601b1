<?php
// Harness stand-in for Moodle's cache/forms.php: the add-instance form base class.
defined('MOODLE_INTERNAL') || die();

/** Records the fields a store's form adds (Moodle's MoodleQuickForm, reduced to what the test reads). */
class harness_quickform {
    /** @var array fields by name: type, label, default, type of param, help */
    public $fields = [];

    public function addElement($type, $name, $label = '', $attributes = null) {
        $this->fields[$name] = ['type' => $type, 'label' => (string) $label];
    }
    public function setType($name, $type) {
        $this->fields[$name]['param'] = $type;
    }
    public function setDefault($name, $value) {
        $this->fields[$name]['default'] = $value;
    }
    public function addHelpButton($name, $identifier, $component) {
        $this->fields[$name]['help'] = get_string($identifier . '_help', $component);
    }
    public function addRule($name, $message, $type) {
        $this->fields[$name]['rule'] = $type;
    }
}

/** Moodle's moodleform, reduced: set_data. */
abstract class moodleform {
    /** @var harness_quickform */
    protected $_form;
    /** @var array data given to set_data */
    public $data = [];

    public function __construct() {
        $this->_form = new harness_quickform();
        $this->definition();
    }
    abstract protected function definition();
    public function set_data($data) {
        $this->data = (array) $data;
    }
    public function fields() {
        return $this->_form->fields;
    }
}

/** Moodle's cachestore_addinstance_form: the store's fields come from configuration_definition(). */
class cachestore_addinstance_form extends moodleform {
    protected function definition() {
        $this->configuration_definition();
    }
    protected function configuration_definition() {
    }
}
